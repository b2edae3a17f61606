#!/usr/bin/env bash
# One step from a fresh clone to a built tree: installs the Debian 12 packages ember needs (when
# any is missing), configures into build/ and builds the library, tools, tests and benchmarks.
# The CUDA backend is compiled when nvcc is found (on PATH or at /usr/local/cuda/bin); a machine
# without a GPU still builds it, and the CUDA tests then report themselves skipped.
#
# Environment knobs:  EMBER_CUDA=AUTO|ON|OFF (default AUTO)   BUILD_DIR=build   JOBS=<nproc>
#                     EMBER_CMAKE_ARGS="..." extra arguments for the CMake configure step
set -euo pipefail
cd "$(dirname "$0")/.."

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

build_dir=${BUILD_DIR:-build}
# shellcheck disable=SC2086  # EMBER_CMAKE_ARGS is a list of words on purpose
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA="${EMBER_CUDA:-AUTO}" ${EMBER_CMAKE_ARGS:-}
cmake --build "$build_dir" -j "${JOBS:-$(nproc)}"
echo "setup: built into $build_dir/ (programs in $build_dir/bin)"
