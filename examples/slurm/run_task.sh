#!/usr/bin/env bash
# run_task.sh: what each Slurm task runs in the job files beside it; one task is one rank.
#
#   srun examples/slurm/run_task.sh PROGRAM [ARGS...]
#
# srun starts one copy per task and sets SLURM_PROCID (the rank), SLURM_NTASKS (the world size),
# SLURM_LOCALID (the rank on its node: the program takes GPU cuda:SLURM_LOCALID), the node list and
# the job id. An ember program reads those itself (parallel::discover_rank, docs/launch.md), so
# this script only checks that it runs inside a task, gives ember's CPU kernels and the BLAS
# library the task's cores (EMBER_NUM_THREADS, OPENBLAS_NUM_THREADS and OMP_NUM_THREADS =
# SLURM_CPUS_PER_TASK, each unless already set: not every site binds a task to its cores, and a
# task that took all of the node's would crowd the others), says where each rank runs, and runs
# PROGRAM.
#
# tests/tools/example_parallel.sh runs the job files, and so this script, with the Slurm variables
# set by hand (a stand-in srun starts the tasks on this machine, talking over 127.0.0.1).
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: srun $0 PROGRAM [ARGS...]" >&2
  exit 2
fi
if [ -z "${SLURM_PROCID:-}" ] || [ -z "${SLURM_NTASKS:-}" ]; then
  echo "$0: SLURM_PROCID or SLURM_NTASKS is not set: start this through srun (in a job file: srun $0 ...)" >&2
  exit 2
fi
if [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  export EMBER_NUM_THREADS=${EMBER_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$SLURM_CPUS_PER_TASK}
fi
echo "run_task.sh: task $SLURM_PROCID of $SLURM_NTASKS on ${SLURMD_NODENAME:-$(uname -n)} (local id ${SLURM_LOCALID:-?}," \
  "GPUs ${CUDA_VISIBLE_DEVICES:-all visible}, master ${MASTER_ADDR:-from SLURM_JOB_NODELIST}:${MASTER_PORT:-from SLURM_JOB_ID})"
exec "$@"
