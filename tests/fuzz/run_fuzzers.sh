#!/usr/bin/env bash
# Runs each libFuzzer harness of an EMBER_FUZZ=ON tree for a bounded time (docs/fuzzing.md);
# fails naming the harness when one finds a crash, a hang, an out-of-memory or a
# sanitizer report.
#
#   tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS_EACH=60] [HARNESS...]
#
# Each fuzzer starts from its seed corpus (tests/fuzz/corpus/<name>/) and the regression inputs
# (tests/fuzz/regressions/<name>/), and writes what it adds to BUILD_DIR/fuzz/work/<name>/ (the
# repository's folders stay as they are). A crash input lands in BUILD_DIR/fuzz/artifacts/<name>/;
# its bytes are printed (base64) so that a CI log is enough to make it a regression input:
#   base64 -d > tests/fuzz/regressions/<name>/<what-it-is>
# Limits: one input may not run 10 s (a hang), one allocation may not exceed 256 MiB (a length
# field of 2^40 must not be believed), the process may not exceed 2 GiB. FUZZ_JOBS (default 2)
# fuzzers run at a time.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS_EACH] [HARNESS...]}
seconds=${2:-60}
shift $(($# < 2 ? $# : 2))
harnesses=("$@")
[ ${#harnesses[@]} -gt 0 ] || harnesses=(config idx cifar checkpoint store)
jobs=${FUZZ_JOBS:-2}

run_one() {
  local name=$1 bin=$build/bin/fuzz_$1
  local work=$build/fuzz/work/$name art=$build/fuzz/artifacts/$name/ log=$build/fuzz/$name.log
  mkdir -p "$work" "$art"
  rm -f "$art"/*
  local inputs=("$work" "$here/corpus/$name")
  [ -d "$here/regressions/$name" ] && inputs+=("$here/regressions/$name")
  local extra=()
  [ -f "$here/$name.dict" ] && extra+=("-dict=$here/$name.dict")
  # LeakSanitizer is on (libFuzzer's -detect_leaks=1): a reader that leaks on a refused input fails.
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$bin" -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=256 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$art" "${extra[@]}" "${inputs[@]}" >"$log" 2>&1
  echo $? >"$log.rc"
}

[ -x "$build/bin/fuzz_config" ] || { echo "run_fuzzers: no $build/bin/fuzz_config: build an EMBER_FUZZ=ON tree first" >&2; exit 2; }
mkdir -p "$build/fuzz"
start=$SECONDS
running=0
for name in "${harnesses[@]}"; do
  [ -x "$build/bin/fuzz_$name" ] || { echo "run_fuzzers: no $build/bin/fuzz_$name" >&2; exit 2; }
  run_one "$name" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

failed=()
printf '%-11s %12s %9s %7s %6s  %s\n' harness executions exec/s corpus cov result
for name in "${harnesses[@]}"; do
  log=$build/fuzz/$name.log
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  execs=$(grep -oE 'stat::number_of_executed_units: +[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  rate=$(grep -oE 'stat::average_exec_per_sec: +[0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  corpus=$(grep -oE 'corp: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  cov=$(grep -oE 'cov: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$')
  result=ok
  [ "$rc" -eq 0 ] || { result="FAILED (exit $rc)"; failed+=("$name"); }
  printf '%-11s %12s %9s %7s %6s  %s\n' "$name" "${execs:-?}" "${rate:-?}" "${corpus:-?}" "${cov:-?}" "$result"
done
for name in "${failed[@]}"; do
  log=$build/fuzz/$name.log
  echo
  echo "run_fuzzers: fuzz_$name failed; the end of its log ($log):"
  tail -n 60 "$log"
  for f in "$build/fuzz/artifacts/$name"/*; do
    [ -f "$f" ] || continue
    echo "run_fuzzers: $f ($(stat -c %s "$f") bytes), base64 (save it under tests/fuzz/regressions/$name/):"
    head -c 65536 "$f" | base64
  done
done
echo "run_fuzzers: ${#harnesses[@]} harnesses, ${seconds} s each, ${jobs} at a time: $((SECONDS - start)) s"
[ ${#failed[@]} -eq 0 ]
