# Sourced by the scenario scripts of tests/tools/ (example_parallel.sh, train_cli.sh, two_hosts.sh)
# after they read their arguments: what each of them starts with.

# fresh_dir DIR: an empty DIR, which becomes the working directory.
fresh_dir() {
  rm -rf "$1"
  mkdir -p "$1"
  cd "$1" || exit 1
}

fail() {
  echo "FAIL: $*"
  exit 1
}

# skip REASON: the scenario cannot run here; CTest reports it Skipped (SKIP_RETURN_CODE 77).
skip() {
  echo "SKIPPED: $*"
  exit 77
}

# Nothing from an outer job may leak in (a CI runner inside Slurm, a launcher's variables), and
# ranks on this machine share its cores.
clean_job_env() {
  unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT EMBER_NUM_THREADS
  local v
  for v in $(compgen -e | grep -E '^(SLURM_|OMPI_)'); do unset "$v"; done
  export OPENBLAS_NUM_THREADS=1
}
