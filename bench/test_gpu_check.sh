#!/usr/bin/env bash
# Checks bench/gpu_check.sh without a GPU: a fake ember_cuda_tests whose groups pass, fail, crash
# and hang stands in for the real one (--no-build), and the summary table must report each group
# on its own line, in its own process, within the call's budget, and end the output.
set -u
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/build/bin" "$work/out"
cat >"$work/build/bin/ember_cuda_tests" <<'EOF'
#!/usr/bin/env bash
# Fake Catch2 program: `-# --list-tags`, or `-# --durations yes <tag expression> ...`.
if [ "$2" = "--list-tags" ]; then
  printf 'All available tags:\n   2  [#test_core_cuda]\n   1  [#test_softmax_cuda]\n   1  [#test_zeta_cuda]\n'
  printf '   1  [#test_hang_cuda]\n   1  [#test_plain]\n   1  [#test_copy_cuda]\n   7  [cuda]\n7 tags\n'
  exit 0
fi
echo "blocking=${CUDA_LAUNCH_BLOCKING:-0}"
case "$4" in
  "[#test_core_cuda]") echo "0.10 s: core one"; echo "All tests passed (12 assertions in 2 test cases)"; exit 0 ;;
  "[#test_softmax_cuda]") echo "  FAILED:"; echo "test cases: 1 | 1 failed"; exit 1 ;;
  "[#test_zeta_cuda]") echo "0.20 s: zeta first"; kill -SEGV $$ ;;
  "[#test_hang_cuda]") exec sleep 60 ;;
  "[#test_plain]") echo "All tests passed (3 assertions in 1 test case)"; exit 0 ;;
  "[#test_copy_cuda]")
    echo "SKIPPED: cuda peer copies between two GPUs: only 1 GPU: no peer to copy to"
    echo "All tests passed (5 assertions in 2 test cases)"; exit 0 ;;
esac
echo "No test cases matched '$4'"
exit 0  # as Catch2 v2 does
EOF
chmod +x "$work/build/bin/ember_cuda_tests"

fail=0
expect() {  # expect DESCRIPTION GREP-PATTERN FILE
  if ! grep -qE -- "$2" "$3"; then
    echo "FAILED: $1 (no line matching '$2' in $3)"
    fail=1
  fi
}

OUT=$work/out bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" --group-timeout 2 --blocking test \
  >"$work/stdout" 2>&1
rc=$?
[ $rc -ne 0 ] || { echo "FAILED: exit status 0 although groups failed"; fail=1; }
last=$(tail -n 5 "$work/stdout")
echo "$last" | grep -q 'test hang' || { echo "FAILED: the table does not end the output"; fail=1; }
expect "a passing group" '^test core +passed .*12 assertions' "$work/stdout"
expect "a failing group, counted" '^test softmax +FAILED .*1 failed' "$work/stdout"
expect "a crash is one group's row" '^test zeta +CRASHED \(signal 11\) .*after "zeta first"' "$work/stdout"
expect "a hang is stopped" '^test hang +TIMEOUT .*killed at 2 s' "$work/stdout"
expect "--blocking reaches the tests" '^blocking=1' "$work/stdout"
expect "the log is kept in OUT" '^test hang' "$work/out/gpu_check.log"
expect "the table is kept in OUT" '^test zeta +CRASHED' "$work/out/gpu_check_summary.txt"

# Budget: a group starts only while 30 s are left, so after a 2 s hang in a 31 s budget, none does.
bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" --group-timeout 2 --budget 31 test hang core \
  >"$work/budget" 2>&1
expect "what did not fit is named" '^test core +NOT RUN .*time budget' "$work/budget"
bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" test core '[cuda]' >"$work/ok" 2>&1 &&
  { echo "FAILED: an unmatched expression counted as passed"; fail=1; }
expect "selected groups only" '^test core +passed' "$work/ok"
expect "an expression that matched nothing is no pass" '^test \[cuda\] +NO TESTS' "$work/ok"
bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" test plain >"$work/plain" 2>&1 ||
  { echo "FAILED: a file tagged without the _cuda suffix did not run"; fail=1; }
expect "a file without the _cuda suffix runs by its own tag" '^test plain +passed .*3 assertions' "$work/plain"
grep -q '^test softmax' "$work/ok" && { echo "FAILED: a group that was not asked for ran"; fail=1; }
bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" test copy >"$work/skip" 2>&1 ||
  { echo "FAILED: a group with a skipped case (and no failure) failed the call"; fail=1; }
expect "skipped cases are counted apart from passed ones" \
  '^test copy +passed, 1 skipped .*5 assertions.*skipped: cuda peer copies between two GPUs: only 1 GPU' "$work/skip"
# sanitize: a fake compute-sanitizer runs the program and reports errors for the softmax group.
mkdir -p "$work/fakebin"
cat >"$work/fakebin/compute-sanitizer" <<'EOF'
#!/usr/bin/env bash
# Fake: --tool T --error-exitcode N PROGRAM ARGS...
tool=$2 code=$4
shift 4
"$@" >/dev/null 2>&1
case "$*" in
  *softmax*) echo "========= ERROR SUMMARY: 2 errors ($tool)"; exit "$code" ;;
esac
echo "========= ERROR SUMMARY: 0 errors ($tool)"
EOF
chmod +x "$work/fakebin/compute-sanitizer"
PATH=$work/fakebin:$PATH bash "$here/gpu_check.sh" --no-build --build-dir "$work/build" sanitize core softmax \
  >"$work/san" 2>&1 && { echo "FAILED: sanitizer errors gave exit status 0"; fail=1; }
expect "a clean group" '^memcheck core +clean .*0 errors \(memcheck\)' "$work/san"
expect "errors are counted" '^memcheck softmax +ERRORS .*2 errors' "$work/san"
expect "racecheck on a shared-memory group" '^racecheck softmax +ERRORS .*\(racecheck\)' "$work/san"
grep -q '^racecheck core' "$work/san" && { echo "FAILED: racecheck ran on a group without shared memory"; fail=1; }
bash "$here/gpu_check.sh" --help | grep -q 'the sequence for a session with a GPU' ||
  { echo "FAILED: --help does not document the sequence"; fail=1; }
[ $fail -eq 0 ] && echo "gpu_check.sh: all checks passed"
exit $fail
