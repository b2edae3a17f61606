#!/usr/bin/env bash
# Builds, on this (GPU-less) machine, what bench/gpu_check.sh runs on the GPU machine, so that the
# device's few minutes go to running rather than compiling: the CUDA build for one architecture
# (default 90: H100/H200) into build-gpu/, without BLAS (the GPU machine has no OpenBLAS), against
# the system's shared zlib, stripped to fit the device tool's 64 MiB carry limit.
#
#   scripts/gpu/prebuild.sh [ARCH]
#   then one device call: bash scripts/gpu/device_call.sh, with carry [".gpu-carry", ".gpu-deps"]
#   (build-gpu/bin and build-gpu/lib travel packed in .gpu-carry/build.tar.xz, about 5 MiB instead
#   of 31, and unpack to the same paths there: the binaries' RUNPATH finds build-gpu/lib).
#
# Seen working 2026-11-26: built here (Debian 12, g++ 12, nvcc 13.0), run on an H200 machine
# (Ubuntu 24.04, driver 580, cuDNN 9.14 and NCCL 2.28.3 in /usr/lib/x86_64-linux-gnu).
set -euo pipefail
cd "$(dirname "$0")/../.."
arch=${1:-90}
export PATH=/usr/local/cuda/bin:$PATH
prefix=()
[ -d .gpu-deps ] && prefix=(-DCMAKE_PREFIX_PATH="$PWD/.gpu-deps")
libz=$(ldconfig -p | grep -m1 -E 'libz\.so\.1 .*x86-64' | sed -E 's/.*=> //')
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_TEST_ONLY= \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_DISABLE_FIND_PACKAGE_BLAS=ON "${prefix[@]}" \
  -DZLIB_LIBRARY="$libz" -DZLIB_INCLUDE_DIR=/usr/include
cmake --build build-gpu -j "${JOBS:-$(nproc)}" --target ember_cuda_tests bench_cuda_ops bench_gpu_train \
  bench_mnist_train bench_data_parallel bench_nccl ember_torch_parity ember-train
# Unstripped copies stay here (not carried) for bench/host_profile_summary.py's addr2line.
mkdir -p build-gpu/symbols
cp build-gpu/lib/libember.so.*.*.* build-gpu/symbols/
cp build-gpu/bin/bench_gpu_train build-gpu/symbols/
(cd build-gpu/symbols && for f in libember.so.*.*.*; do ln -sf "$f" "${f%.*.*}"; done)
strip --strip-unneeded build-gpu/lib/libember.so.*.*.* build-gpu/bin/*  # not the symlinks
mkdir -p .gpu-carry
tar -cf - build-gpu/bin build-gpu/lib | xz -T0 -6 >.gpu-carry/build.tar.xz
du -shc build-gpu/bin build-gpu/lib .gpu-carry/build.tar.xz
