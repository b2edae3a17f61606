#!/usr/bin/env bash
# How long README's first command takes from a fresh clone (issue 30): clones this repository at
# REF into a new folder, runs `scripts/setup.sh && build/bin/mnist --epochs 2` there with ccache off,
# and prints the seconds from the clone's start to setup.sh's end and to the first epoch's line.
#
#   bench/first_command_time.sh [--remove-packages] [--keep] REF [REF ...]
#
# --remove-packages (root): removes ember's Debian packages before each run (catch2, cmake,
#   dataset-fashion-mnist, libopenblas-dev, ninja-build, nlohmann-json3-dev; not g++ or zlib1g-dev,
#   which others depend on) and moves apt's downloaded .deb files aside, so that setup.sh
#   downloads and installs them as on a fresh machine. setup.sh puts the packages back.
# --keep: leaves the clones (in $TMPDIR) instead of removing them.
# Each run's output, every line stamped with its second, goes to first_command_<REF>.log here.
# Runs one REF after another: compare commits measured in one call, on a machine doing nothing else.
set -u
remove=0 keep=0 refs=()
for a in "$@"; do
  case $a in
  --remove-packages) remove=1 ;;
  --keep) keep=1 ;;
  -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
  -*) echo "first_command_time: unknown flag '$a'" >&2; exit 2 ;;
  *) refs+=("$a") ;;
  esac
done
[ ${#refs[@]} -gt 0 ] || { echo "first_command_time: give at least one commit" >&2; exit 2; }
[ $remove = 0 ] || [ "$(id -u)" = 0 ] || { echo "first_command_time: --remove-packages needs root" >&2; exit 2; }
repo=$(cd "$(dirname "$0")/.." && pwd)
packages="catch2 cmake dataset-fashion-mnist libopenblas-dev ninja-build nlohmann-json3-dev"
printf '%-12s %14s %22s %6s\n' commit "setup.sh end s" "first epoch line s" exit
for ref in "${refs[@]}"; do
  commit=$(git -C "$repo" rev-parse --short "$ref^{commit}") || exit 2
  if [ $remove = 1 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get remove -y -qq $packages >/dev/null || {
      echo "first_command_time: apt-get remove failed (dpkg --configure -a?)" >&2; exit 1; }
    mkdir -p "${TMPDIR:-/tmp}/first_command_debs"
    find /var/cache/apt/archives -maxdepth 1 -name '*.deb' -exec mv -t "${TMPDIR:-/tmp}/first_command_debs" {} +
  fi
  dir=$(mktemp -d "${TMPDIR:-/tmp}/first_command_$commit.XXXX")
  log=$PWD/first_command_$commit.log
  start=$(date +%s.%N)
  {
    git clone -q "$repo" "$dir/ember" && cd "$dir/ember" && git checkout -q "$commit" &&
      CCACHE_DISABLE=1 scripts/setup.sh && build/bin/mnist --epochs 2
    echo "exit $?"
  } 2>&1 | while IFS= read -r line; do
    printf '%7.1f %s\n' "$(echo "$(date +%s.%N) - $start" | bc)" "$line"
  done >"$log"
  setup_s=$(sed -n 's/^ *\([0-9.]*\) setup: built.*/\1/p' "$log" | head -1)
  epoch_s=$(sed -n 's/^ *\([0-9.]*\) epoch 1\/[0-9]*  train_loss.*/\1/p' "$log" | head -1)
  status=$(sed -n 's/^ *[0-9.]* exit \([0-9]*\)$/\1/p' "$log" | tail -1)
  printf '%-12s %14s %22s %6s\n' "$commit" "${setup_s:--}" "${epoch_s:--}" "${status:--}"
  [ $keep = 1 ] || rm -rf "$dir"
done
