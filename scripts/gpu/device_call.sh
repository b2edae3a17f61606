#!/usr/bin/env bash
# The whole GPU check in ONE device call, on binaries built here by scripts/gpu/prebuild.sh: a session
# gets 15 minutes of device time, starts included, so everything goes into one call of about
# 5 minutes (285 s on 2026-11-27), leaving time for more starts if a fix needs a rerun.
#
#   here:   ../shared/gpu/stage.sh && scripts/gpu/prebuild.sh
#   device: bash scripts/gpu/device_call.sh       carry [".gpu-carry", ".gpu-deps"]
#
# Steps, each a bench/gpu_check.sh call with its own time budget (seconds, overridable by the
# environment), its summary table copied to $OUT/summary-<step>.txt:
#   test      every [cuda] test group                                      (TEST_BUDGET, 200)
#   bench     the GPU benchmarks beside PyTorch, ember-train on cuda:0 and
#             ember_torch_parity --device cuda                               (BENCH_BUDGET, 190)
#   sanitize  compute-sanitizer memcheck/racecheck on the shared-memory and
#             cuDNN groups                                                 (SANITIZE_BUDGET, 80)
#   profile   ncu on the sum, softmax and cross-entropy kernels            (PROFILE_BUDGET, 45)
# Meanwhile, in the background during the tests, a from-source configure and build of the library
# (SOURCE_TARGETS, default ember; ninja object paths work too) with this machine's own compilers
# (bench/gpu_check.sh's configure; its host-compiler probe), log in $OUT/source_build.log; it is
# stopped before the benchmarks start so they run alone.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
t0=$SECONDS
if [ -f .gpu-carry/build.tar.xz ]; then
  tar -xJf .gpu-carry/build.tar.xz || { echo "device_call: cannot unpack .gpu-carry/build.tar.xz"; exit 1; }
fi
[ -x build-gpu/bin/ember_cuda_tests ] || { echo "device_call: no build-gpu/bin (run scripts/gpu/prebuild.sh here)"; exit 1; }

mkdir -p /tmp/source-build-out
# setsid: its own process group, so that stopping it stops cmake and the compilers too.
OUT=/tmp/source-build-out setsid nice -n 10 bash bench/gpu_check.sh --build-dir build-source --budget "${SOURCE_BUDGET:-300}" \
  build ${SOURCE_TARGETS:-ember} >"$out/source_build.log" 2>&1 &
source_pid=$!

step() {  # NAME BUDGET PHASE ARGS...
  local name=$1 budget=$2
  shift 2
  bash bench/gpu_check.sh --no-build --budget "$budget" "$@"
  [ -f "$out/gpu_check_summary.txt" ] && cp "$out/gpu_check_summary.txt" "$out/summary-$name.txt"
}
# TEST_GROUPS, BENCH_PROGRAMS, SANITIZE_GROUPS (space-separated) narrow a rerun to what changed.
read -r -a test_groups <<<"${TEST_GROUPS:-}"
read -r -a bench_programs <<<"${BENCH_PROGRAMS:-}"
read -r -a sanitize_groups <<<"${SANITIZE_GROUPS:-}"
step test "${TEST_BUDGET:-200}" test "${test_groups[@]}"
if kill -0 "$source_pid" 2>/dev/null; then
  echo "device_call: stopping the source build (still running after the tests)"
  kill -- -"$source_pid" 2>/dev/null || kill "$source_pid"
fi
wait "$source_pid"
tail -n 8 "$out/source_build.log"
echo "device_call: the source build's last lines:"
tail -n 3 build-source/gpu-check-logs/build.log 2>/dev/null
grep -E '^CMAKE_(CUDA_HOST_COMPILER|CXX_COMPILER):' build-source/CMakeCache.txt 2>/dev/null
step bench "${BENCH_BUDGET:-190}" bench "${bench_programs[@]}"
step sanitize "${SANITIZE_BUDGET:-80}" sanitize "${sanitize_groups[@]}"
step profile "${PROFILE_BUDGET:-45}" profile
rm -f "$out/gpu_check_summary.txt"
echo "==== device_call: $((SECONDS - t0)) s; summaries:"
cat "$out"/summary-*.txt
