#!/usr/bin/env bash
# On a machine with a GPU: configure (CUDA on), build, run every test (the [cuda] ones included,
# which must now pass rather than skip), run the GPU benchmark, and print a short summary last.
# When .gpu-deps/ exists (staged by ../shared/gpu/stage.sh for machines without package access),
# Catch2, nlohmann_json and zlib are taken from there.
#
#   bench/gpu_check.sh [build-dir]        (default build-gpu; JOBS=<n> to override nproc)
set -uo pipefail
cd "$(dirname "$0")/.."
# Under the device tool's `run`, $OUT comes back even when the command is killed at its time
# limit: keep a copy of everything there as it happens, and say how long each phase took.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then exec > >(tee -a "$OUT/gpu_check.log") 2>&1; fi
t0=$SECONDS
phase() { echo "gpu_check: $1 done at +$((SECONDS - t0)) s"; }
build=${1:-build-gpu}
jobs=${JOBS:-$(nproc)}
export PATH=/usr/local/cuda/bin:$PATH

args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON)
if [ -d .gpu-deps ]; then
  args+=(-DCMAKE_PREFIX_PATH="$PWD/.gpu-deps" -DZLIB_ROOT="$PWD/.gpu-deps")
fi
# Build for the GPU in this machine only (faster than the default architecture list).
if cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) && [ -n "$cc" ]; then
  args+=(-DCMAKE_CUDA_ARCHITECTURES="${cc/./}")
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
echo "gpu_check: GPU: ${gpu:-none found (nvidia-smi failed)}"

status_configure=ok status_build=ok status_tests=ok status_bench=ok
cmake -S . -B "$build" "${args[@]}" || status_configure=FAILED
echo "gpu_check: cuDNN: $(grep -E '^CUDNN_LIBRARY:' "$build/CMakeCache.txt" | cut -d= -f2-)" \
     "(headers $(grep -E '^CUDNN_INCLUDE_DIR:' "$build/CMakeCache.txt" | cut -d= -f2-))"
echo "gpu_check: NCCL:  $(grep -E '^NCCL_LIBRARY:' "$build/CMakeCache.txt" | cut -d= -f2-)" \
     "(headers $(grep -E '^NCCL_INCLUDE_DIR:' "$build/CMakeCache.txt" | cut -d= -f2-))"
phase configure
[ $status_configure = ok ] && { cmake --build "$build" -j "$jobs" || status_build=FAILED; }
phase build

ctest_log=$(mktemp)
if [ $status_build = ok ]; then
  ctest --test-dir "$build" --output-on-failure -j "$jobs" 2>&1 | tee "$ctest_log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || status_tests=FAILED
  # On a GPU machine a skipped [cuda] test means the GPU was not used: that is a failure here.
  if grep -qE 'cuda/.*Skipped' "$ctest_log"; then
    echo "gpu_check: the CUDA tests were skipped: no usable GPU"
    status_tests="FAILED: CUDA tests skipped, no usable GPU;"
  fi
  phase tests
fi

bench_log=$(mktemp)
if [ $status_build = ok ]; then
  "$build/bin/bench_cuda_ops" 2>&1 | tee "$bench_log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 77 ]; then status_bench="FAILED (bench_cuda_ops found no GPU)"
  elif [ "$rc" -ne 0 ]; then status_bench="FAILED (bench_cuda_ops exit $rc)"; fi
  phase bench_cuda_ops
fi

# Issue 3's GPU target (an mnist_cnn epoch with the resident loader, cuDNN conv time per step) and
# issue 4's GPU path (ember-train on cuda:0: CUDA-event phase timers, NVTX ranges, resident data).
mnist_log=$(mktemp)
train_status=skipped
if [ $status_build = ok ]; then
  "$build/bin/bench_mnist_train" 2>&1 | tee "$mnist_log" || status_bench="FAILED (bench_mnist_train)"
  phase bench_mnist_train
  data_dir=/usr/share/datasets/fashion-mnist
  [ -d .gpu-deps/data/fashion-mnist ] && data_dir=$PWD/.gpu-deps/data/fashion-mnist
  rm -rf "$build/gpu-run"
  if "$build/bin/ember-train" configs/mnist_cnn.json device=cuda data.path="$data_dir" epochs=3 \
       early_stop.target_accuracy=null output.run_dir="$build/gpu-run" 2>&1 | tail -n 8; then
    train_status=ok
  else
    train_status=FAILED
  fi
  phase ember-train
fi

echo
echo "==== gpu_check summary ($(date -u +%Y-%m-%dT%H:%MZ), GPU: ${gpu:-none}) ===="
printf '%-10s %s\n' configure "$status_configure" build "$status_build" \
  tests "$status_tests ($(grep -E 'tests passed|tests failed' "$ctest_log" | tail -n 1))" \
  bench "$status_bench"
grep -E '^(op|-|cuda|add|sum|softmax|caching|alloc|check|bench_cuda_ops)' "$bench_log" || true
grep -iE 'gpu|cudnn|epoch' "$mnist_log" | tail -n 8 || true
echo "ember-train on cuda: $train_status"
[ -f "$build/gpu-run/metrics.jsonl" ] && cat "$build/gpu-run/metrics.jsonl"
rm -f "$ctest_log" "$bench_log" "$mnist_log"
[ "$status_configure$status_build$status_tests$status_bench$train_status" = okokokokok ]
