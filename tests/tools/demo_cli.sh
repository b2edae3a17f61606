#!/usr/bin/env bash
# Runs build/bin/ember-demo as a user would (tests/tools/demo.cmake):
#   - numbers are parsed whole: '--steps x', '--steps 5x', '--lr abc', '--seed -3' exit 2 naming the
#     flag and the value (once '--steps x' ran 0 steps and failed as "did not lower the loss");
#   - out-of-range values ('--steps 0', '--lr -1'), an unknown flag, a missing value, a device that
#     is not a device name exit 2; --help prints the usage and the options and exits 0;
#   - --device auto (the default) and --device cpu train and lower the loss (exit 0).
set -u
demo=$1
fail=0
expect() {  # expect RC REGEX ARGS...
  local want_rc=$1 regex=$2
  shift 2
  local out rc
  out=$("$demo" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: 'ember-demo $*' exited with $rc, expected $want_rc; output:"
    printf '%s\n' "$out" | head -n 5
    fail=1
  elif ! grep -qE -- "$regex" <<<"$out"; then
    echo "FAIL: the output of 'ember-demo $*' does not match /$regex/; output:"
    printf '%s\n' "$out" | head -n 5
    fail=1
  else
    echo "ok: ember-demo $* -> $rc"
  fi
}
expect 2 "--steps 'x' is not a whole number" --steps x
expect 2 "--steps '5x' is not a whole number" --steps 5x
expect 2 "--steps 0: at least 1 step" --steps 0
expect 2 "--lr 'abc' is not a number" --lr abc
expect 2 "--lr -1: must be > 0" --lr -1
expect 2 "--seed '-3' is not a whole number" --seed -3
expect 2 "--device 'gpu': invalid device 'gpu'" --device gpu
expect 2 "unknown flag '--bogus'" --bogus
expect 2 "--steps needs a value" --steps
expect 0 "^usage: ember-demo .*--device auto\|cpu" --help
expect 0 "device cpu, 30 steps" --device cpu --steps 30
expect 0 "^final: loss" --device auto --steps 30
[ $fail -eq 0 ] && echo "demo_cli.sh: all checks passed"
exit $fail
