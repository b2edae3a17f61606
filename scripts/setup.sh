#!/usr/bin/env bash
# One step from a fresh clone to a built tree: installs the Debian 12 packages ember needs (when
# any is missing), configures into build/ and builds what a user needs to train (the library,
# ember-train, ember-run, ember-report, ember-demo, the mnist and cifar examples: the CMake target
# `programs`). `--all` builds everything, tests and benchmarks included; README's test command
# builds them itself (`cmake --build build`) before it runs them.
#
# The CUDA backend: with EMBER_CUDA=AUTO (the default) it is compiled when nvcc is found (on PATH or
# at /usr/local/cuda/bin) and a GPU is visible (nvidia-smi lists one), for that GPU's architecture
# only (CMAKE_CUDA_ARCHITECTURES=native). Without a visible GPU the tree is CPU-only: that is what
# runs here. EMBER_CUDA=ON compiles the backend anyway (a login node building for GPU nodes; CI),
# for sm_80 and sm_90 unless a GPU is visible or EMBER_CUDA_ARCHS says otherwise.
#
# Environment knobs:  EMBER_CUDA=AUTO|ON|OFF   EMBER_CUDA_ARCHS="80;90" (CMake's CUDA_ARCHITECTURES)
#                     BUILD_DIR=build   JOBS=<nproc>   EMBER_CMAKE_ARGS="..." (extra configure arguments)
set -euo pipefail
cd "$(dirname "$0")/.."

target=programs
for arg in "$@"; do
  case $arg in
    --all) target=all ;;
    -h | --help)
      sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    *)
      echo "setup: unknown argument '$arg' (expected --all or --help)" >&2
      exit 2
      ;;
  esac
done

packages=(cmake g++ ninja-build catch2 nlohmann-json3-dev zlib1g-dev libopenblas-dev dataset-fashion-mnist)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The CUDA toolkit installs outside PATH; let CMake find nvcc there.
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi

gpus=0
if command -v nvidia-smi >/dev/null 2>&1; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
fi
cuda=${EMBER_CUDA:-AUTO}
cuda=${cuda^^}
cuda_args=()
if [ "$cuda" = AUTO ] && command -v nvcc >/dev/null 2>&1 && [ "$gpus" -eq 0 ]; then
  why="nvidia-smi lists none"
  command -v nvidia-smi >/dev/null 2>&1 || why="no nvidia-smi: no NVIDIA driver"
  echo "setup: nvcc is here but no GPU is visible ($why): building the CPU backend only." \
    "To compile the CUDA backend anyway (a login node building for GPU nodes), run EMBER_CUDA=ON $0"
  cuda=OFF
fi
if [ "$cuda" != OFF ]; then
  if [ -n "${EMBER_CUDA_ARCHS:-}" ]; then
    cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=$EMBER_CUDA_ARCHS")
  elif [ "$gpus" -gt 0 ]; then
    cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=native")  # the visible GPU's architecture only
  else
    cuda_args+=("-DCMAKE_CUDA_ARCHITECTURES=80;90")
  fi
fi
# ccache, when installed, makes a rebuild after an edit or a fresh build folder quick.
if command -v ccache >/dev/null 2>&1; then
  cuda_args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  [ "$cuda" = OFF ] || cuda_args+=(-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

build_dir=${BUILD_DIR:-build}
# shellcheck disable=SC2086  # EMBER_CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA="$cuda" "${cuda_args[@]}" ${EMBER_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}" --target "$target"
if [ "$target" = all ]; then
  echo "setup: built everything into $build_dir/ (programs in $build_dir/bin)"
else
  echo "setup: built the library and programs into $build_dir/bin; the tests and benchmarks build with" \
    "'cmake --build $build_dir' (README's test command does it) or '$0 --all'"
fi
