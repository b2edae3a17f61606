#!/usr/bin/env bash
# The GPU check, in phases that each fit one device call of under 10 minutes. See --help.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'EOF'
usage: bench/gpu_check.sh [options] PHASE [ARGS...] [PHASE [ARGS...]]...

Runs ember's GPU check on a machine with a GPU, one phase or a few per call, so that every call
ends well inside a 10-minute limit with a summary table, and a fault in one test group cannot
hide the others.

phases
  build [TARGET...]  configure (CUDA on, this GPU's architecture only) and build only what the
                     GPU run needs: ember_cuda_tests, bench_cuda_ops, bench_gpu_train,
                     bench_mnist_train, bench_data_parallel, bench_nccl, ember_torch_parity,
                     ember-train (or the
                     TARGETs named, e.g. `build ember` for the library alone). Incremental: a
                     no-op when nothing changed.
  test [GROUP...]    the [cuda] tests, one process per group, so an illegal address or a hang in
                     one group leaves the others running. A group is a test file:
                     core stream copy elementwise reduce random index softmax matmul conv pool
                     norm optim data models checkpoint train cuda_graph (ember_cuda_tests -# --list-tags
                     shows them; a new file is a new group). No GROUP: every group, those
                     not yet run on a GPU first (default_order below). A GROUP
                     starting with '[' is a Catch2 tag expression run as one group. Catch2
                     arguments after `--` go to every group (e.g. -- "cuda softmax*" -s).
  bench [PROGRAM...] bench_cuda_ops and bench_gpu_train (each beside PyTorch on the same GPU, through
                     bench/peers/torch_gpu.py), bench_mnist_train, bench_data_parallel ({cuda:0,
                     cuda:0}), bench_nccl (world size 1 beside PyTorch's NCCL),
                     ember_torch_parity --device cuda (ember and PyTorch trained step for step
                     on the GPU, tests/peer/) and a 2-epoch ember-train on cuda:0.
  sanitize [GROUP...] compute-sanitizer over the groups' [cuda] tests, [slow] ones left out:
                     memcheck on each group, racecheck too on the groups whose kernels use shared
                     memory (softmax reduce norm pool pool_layout_device). No GROUP: softmax
                     reduce norm pool conv memory_format_device pool_layout_device (the
                     channels-last paths: NHWC pooling, conv, batch norm's (N*H*W, C, 1) view).
                     A row per group and tool with the tool's error summary; groups the budget
                     leaves out get a NOT RUN row (run them in the next call).
  profile            Nsight Compute (ncu --clock-control none) on bench_cuda_ops --quick (its peer
                     off): one launch of each of the sum, softmax and cross-entropy kernels, with
                     duration, DRAM throughput, occupancy and registers in the table.
  list               the groups and their test counts.
  test and bench build first what they need (a fresh machine starts bare; an up-to-date build
  costs a second). Phases run in the order given; each stops starting new work once the call's
  time budget is spent, and says what it left.

options
  --blocking         CUDA_LAUNCH_BLOCKING=1 for everything run (a fault is then reported at the
                     launch that caused it); same as GPU_CHECK_BLOCKING=1.
  --build-dir DIR    build folder (default build-gpu).
  --budget SECONDS   time for the whole call (default 540); a group or program starts only while
                     at least 30 s are left and is stopped when the budget runs out.
  --group-timeout S  limit per test group (default 300).
  --no-build         use the build folder as it is (no cmake at all).
  -h, --help         this text.
  JOBS=<n> sets the build's parallelism (default: nproc).

the sequence for a session with a GPU (each line one device call; ../shared/gpu/stage.sh once
before, here, and carry [".gpu-deps"] with every call):
  1. bash bench/gpu_check.sh build test core stream copy softmax index
  2. bash bench/gpu_check.sh test elementwise reduce random matmul conv pool norm
  3. bash bench/gpu_check.sh test optim data models checkpoint train
  4. bash bench/gpu_check.sh bench
  A call that lands on a fresh machine rebuilds first; the budget then leaves fewer groups run,
  and the table names those left for the next call. To chase a fault:
  bash bench/gpu_check.sh --blocking test softmax -- "cuda cross_entropy*" -s

output: everything is printed and appended to $OUT/gpu_check.log as it happens (kept when a call
is cut off); the summary table ends every call and is also written to $OUT/gpu_check_summary.txt;
ember-train's metrics.jsonl goes to $OUT too.
EOF
}

build=build-gpu
budget=540
group_timeout=300
no_build=no
[ -n "${GPU_CHECK_BLOCKING:-}" ] && [ "${GPU_CHECK_BLOCKING}" != 0 ] && export CUDA_LAUNCH_BLOCKING=1
phases=()  # "phase arg arg ..." entries, arguments separated by \x1f
catch_args=()
current=""
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --blocking) export CUDA_LAUNCH_BLOCKING=1 ;;
    --build-dir) build=$2; shift ;;
    --budget) budget=$2; shift ;;
    --group-timeout) group_timeout=$2; shift ;;
    --no-build) no_build=yes ;;
    --) shift; catch_args=("$@"); break ;;
    build|test|bench|sanitize|profile|list)
      [ -n "$current" ] && phases+=("$current")
      current=$1 ;;
    *)
      if [ -z "$current" ]; then echo "gpu_check: unknown option or phase '$1' (see --help)" >&2; exit 2; fi
      current+=$'\x1f'"$1" ;;
  esac
  shift
done
[ -n "$current" ] && phases+=("$current")
if [ ${#phases[@]} -eq 0 ]; then usage; exit 2; fi

# Under the device tool's `run`, $OUT comes back even when the command is killed at its time
# limit: keep a copy of everything there as it happens.
out_dir=""
tee_pid=""
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  out_dir=$OUT
  exec > >(tee -a "$OUT/gpu_check.log") 2>&1
  tee_pid=$!
fi
t0=$SECONDS
elapsed() { echo $((SECONDS - t0)); }
left() { echo $((budget - (SECONDS - t0))); }
limit() {  # seconds a command may take: min(left, $1 if given), at least 1 (timeout 0 would mean none)
  local l=$((budget - (SECONDS - t0)))
  [ $# -gt 0 ] && [ "$1" -lt "$l" ] && l=$1
  [ "$l" -lt 1 ] && l=1
  echo "$l"
}
export PATH=/usr/local/cuda/bin:$PATH
# The peers (bench/peers/, tests/peer/) are found here, not in the tree the binaries were built
# from (scripts/gpu/prebuild.sh builds them on another machine).
export EMBER_SOURCE_DIR=$PWD
jobs=${JOBS:-$(nproc)}
logdir=$build/gpu-check-logs
mkdir -p "$logdir"
sep=$'\x1e'  # between the fields of a summary row (details contain '|')
rows=()  # summary rows: name, result, detail, seconds
add_row() { rows+=("$1$sep$2$sep$3$sep$4"); echo "gpu_check: $1: $2 ${3:+($3)} in $4 s, +$(elapsed) s"; }

gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)
echo "gpu_check: $(date -u +%Y-%m-%dT%H:%MZ) GPU: ${gpu:-none found (nvidia-smi failed)};" \
     "CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-0}; budget ${budget} s"

# ---- build ----

configured=no
configure() {
  [ $configured = yes ] && return 0
  local args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DEMBER_CUDA=ON -DEMBER_TEST_ONLY=)
  if [ -d .gpu-deps ]; then
    args+=(-DCMAKE_PREFIX_PATH="$PWD/.gpu-deps" -DZLIB_ROOT="$PWD/.gpu-deps")
    # The staged libz.a is not position-independent and cannot go into libember.so: link the
    # machine's own libz.so.1 (every distribution has it) with the staged header.
    local libz
    libz=$(ldconfig -p 2>/dev/null | grep -m1 -E 'libz\.so\.1 .*x86-64' | sed -E 's/.*=> //')
    [ -n "$libz" ] && args+=(-DZLIB_LIBRARY="$libz" -DZLIB_INCLUDE_DIR="$PWD/.gpu-deps/include")
  fi
  # This GPU's architecture only (much faster than the default list).
  local cc
  if cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1) && [ -n "$cc" ]; then
    args+=(-DCMAKE_CUDA_ARCHITECTURES="${cc/./}")
  fi
  if command -v ccache >/dev/null; then
    args+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  cmake -S . -B "$build" "${args[@]}" >"$logdir/configure.log" 2>&1 || { tail -n 30 "$logdir/configure.log"; return 1; }
  echo "gpu_check: cuDNN $(grep -E '^CUDNN_LIBRARY:' "$build/CMakeCache.txt" | cut -d= -f2-)," \
       "NCCL $(grep -E '^NCCL_LIBRARY:' "$build/CMakeCache.txt" | cut -d= -f2-)"
  configured=yes
}

# build_targets NAME TARGET...: one summary row; returns non-zero when the build failed.
build_targets() {
  local name=$1 t=$SECONDS
  shift
  [ $no_build = yes ] && return 0
  if ! configure; then add_row "$name" FAILED "cmake configure, see $logdir/configure.log" $((SECONDS - t)); return 1; fi
  if timeout -k 10 "$(limit)" cmake --build "$build" -j "$jobs" --target "$@" >"$logdir/$name.log" 2>&1; then
    local warnings
    warnings=$(grep -c 'warning' "$logdir/$name.log")
    add_row "$name" ok "$* ; $warnings warning lines" $((SECONDS - t))
  else
    grep -E 'error|Error' "$logdir/$name.log" | head -n 20
    tail -n 5 "$logdir/$name.log"
    add_row "$name" FAILED "see $logdir/$name.log" $((SECONDS - t))
    return 1
  fi
}

# ---- test ----

tests_bin=$build/bin/ember_cuda_tests
# The groups whose code has not yet run on a GPU first, so that a call cut short by its budget
# still runs them (the rest passed on 2026-11-27); groups not named here follow in the binary's order.
default_order=(cuda_graph determinism profile memory_format_device pool_layout_device conv norm pool softmax index
               core stream copy elementwise reduce random matmul optim data models checkpoint train)

# The groups the binary knows: test files, as the tags Catch2's -# gives them ([#test_softmax_cuda]).
known_groups() {
  "$tests_bin" -# --list-tags 2>/dev/null | grep -oE '\[#[A-Za-z0-9_]+\]' | sed -E 's/^\[#test_//; s/_cuda\]$//; s/\]$//' |
    sort -u
}

listed_tags=""
tag_of() {  # group name -> Catch2 tag expression: the file's tag as the binary lists it
  case "$1" in
    \[*) echo "$1"; return ;;
  esac
  [ -n "$listed_tags" ] || listed_tags=$("$tests_bin" -# --list-tags 2>/dev/null)
  if grep -qF "[#test_$1]" <<<"$listed_tags" && ! grep -qF "[#test_$1_cuda]" <<<"$listed_tags"; then
    echo "[#test_$1]"  # a file named without the _cuda suffix
  else
    echo "[#test_$1_cuda]"
  fi
}

# run_group NAME: one process; classifies its exit and counts.
run_group() {
  local name=$1 expr log t=$SECONDS rc result detail
  expr=$(tag_of "$name")
  log=$logdir/test-${name//[^A-Za-z0-9_]/_}.log
  local limit
  limit=$(limit "$group_timeout")
  echo "==== gpu_check: test group $name ($expr), limit ${limit} s ===="
  # --durations yes: Catch2 prints "<seconds> s: <name>" after each test case, so a crash or a
  # hang can be placed after the last one that finished.
  timeout -k 10 "$limit" "$tests_bin" -# --durations yes "$expr" "${catch_args[@]}" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  detail=$(grep -E '^(All tests passed|test cases:)' "$log" | tail -n 1)
  if grep -q '^No test cases matched' "$log"; then detail="no test matched $expr"; fi
  local last
  last=$(grep -E '^[0-9.]+ s: ' "$log" | tail -n 1 | sed -E 's/^[0-9.]+ s: //' | cut -c1-70)
  last="after \"${last:-(none finished)}\""
  case $rc in
    0)  # Catch2 exits 0 when its expression matched nothing: that is no evidence. Cases that ended
      # with EMBER_SKIP (tests/support/skip.h) print "SKIPPED: <case>: <reason>": counted apart.
      local skipped
      skipped=$(grep -c '^SKIPPED: ' "$log")
      if grep -q '^No test cases matched' "$log"; then
        result="NO TESTS"
      elif [ "$skipped" -gt 0 ]; then
        result="passed, $skipped skipped"
        detail="$detail; skipped: $(grep '^SKIPPED: ' "$log" | sed 's/^SKIPPED: //' | paste -sd ';' | cut -c1-200)"
      else
        result=passed
      fi ;;
    77) result="SKIPPED" detail=$(grep -m1 '^SKIPPED' "$log") ;;
    124|137) result=TIMEOUT detail="killed at ${limit} s, $last" ;;
    *)
      if [ "$rc" -gt 128 ]; then
        result="CRASHED (signal $((rc - 128)))" detail="$last; see $log"
      else
        result=FAILED detail="${detail:-exit $rc}; $(grep -c 'FAILED:' "$log") failed checks, see $log"
      fi ;;
  esac
  add_row "test $name" "$result" "$detail" $((SECONDS - t))
}

phase_test() {
  build_targets build-tests ember_cuda_tests || return
  local groups=("$@") all
  if [ ${#groups[@]} -eq 0 ]; then
    mapfile -t all < <(known_groups)
    for g in "${default_order[@]}"; do
      printf '%s\n' "${all[@]}" | grep -qx "$g" && groups+=("$g")
    done
    for g in "${all[@]}"; do  # files added since this list was written
      printf '%s\n' "${default_order[@]}" | grep -qx "$g" || groups+=("$g")
    done
    [ ${#groups[@]} -eq 0 ] && groups=("[cuda]")  # cannot list (e.g. no GPU): one group
  fi
  local i
  for ((i = 0; i < ${#groups[@]}; i++)); do
    if [ "$(left)" -lt 30 ]; then
      add_row "test ${groups[*]:i}" "NOT RUN" "time budget spent; run them in the next call" 0
      return
    fi
    run_group "${groups[i]}"
  done
}

phase_list() {
  build_targets build-tests ember_cuda_tests || return
  "$tests_bin" -# --list-tags
}

# ---- bench ----

run_program() {  # NAME CMD...
  local name=$1 t=$SECONDS rc
  shift
  if [ "$(left)" -lt 30 ]; then add_row "$name" "NOT RUN" "time budget spent" 0; return; fi
  echo "==== gpu_check: $name ===="
  timeout -k 10 "$(limit)" "$@" 2>&1 | tee "$logdir/$name.log"
  rc=${PIPESTATUS[0]}
  case $rc in
    0) add_row "$name" ok "" $((SECONDS - t)) ;;
    77) add_row "$name" SKIPPED "no usable GPU (or, for a peer run, no PyTorch)" $((SECONDS - t)) ;;
    124|137) add_row "$name" TIMEOUT "stopped at the time budget" $((SECONDS - t)) ;;
    *) add_row "$name" FAILED "exit $rc, see $logdir/$name.log" $((SECONDS - t)) ;;
  esac
}

ran_bench=no  # the benchmark sections of the summary belong to the call that ran them
phase_bench() {  # [PROGRAM...]: only those (bench_cuda_ops bench_gpu_train ... ember-train); none: all
  ran_bench=yes
  local all=(bench_cuda_ops bench_gpu_train bench_mnist_train bench_data_parallel bench_nccl ember-train
             ember_torch_parity)
  local chosen=("$@")
  [ ${#chosen[@]} -eq 0 ] && chosen=("${all[@]}")
  build_targets build-bench "${chosen[@]}" || return
  local data_dir=/usr/share/datasets/fashion-mnist p
  [ -d .gpu-deps/data/fashion-mnist ] && data_dir=$PWD/.gpu-deps/data/fashion-mnist
  for p in "${chosen[@]}"; do
    case $p in
      bench_gpu_train) run_program bench_gpu_train "$build/bin/bench_gpu_train" --data "$data_dir" ;;
      ember_torch_parity) run_program ember_torch_parity "$build/bin/ember_torch_parity" --device cuda ;;
      ember-train)
        rm -rf "$build/gpu-run"
        run_program ember-train "$build/bin/ember-train" configs/mnist_cnn.json device=cuda data.path="$data_dir" \
          epochs=2 early_stop.target_accuracy=null output.run_dir="$build/gpu-run"
        if [ -f "$build/gpu-run/metrics.jsonl" ]; then
          cat "$build/gpu-run/metrics.jsonl"
          [ -n "$out_dir" ] && cp "$build/gpu-run/metrics.jsonl" "$out_dir/gpu_check_metrics.jsonl"
        fi ;;
      bench_*) run_program "$p" "$build/bin/$p" ;;
      *) add_row "$p" "NOT RUN" "not a benchmark of this phase (${all[*]})" 0 ;;
    esac
  done
}

# ---- sanitize ----

# run_sanitizer TOOL GROUP: one compute-sanitizer process over the group's tests, [slow] ones left out.
run_sanitizer() {
  local tool=$1 name=$2 t=$SECONDS log rc found result
  log=$logdir/$tool-${name//[^A-Za-z0-9_]/_}.log
  echo "==== gpu_check: $tool over test group $name ===="
  timeout -k 10 "$(limit "$group_timeout")" compute-sanitizer --tool "$tool" --error-exitcode 99 \
    "$tests_bin" -# "$(tag_of "$name")~[slow]" >"$log" 2>&1
  rc=$?
  tail -n 3 "$log"
  found=$(grep -m1 -E '(ERROR|RACECHECK) SUMMARY' "$log" | sed -E 's/^=+ *//')
  case $rc in
    0) result=clean ;;
    99) result=ERRORS ;;
    124|137) result=TIMEOUT found="killed at $(limit "$group_timeout") s" ;;
    *) result="FAILED" found="${found:-exit $rc}; tests failed under the tool, see $log" ;;
  esac
  add_row "$tool $name" "$result" "${found:-no summary line}" $((SECONDS - t))
}

phase_sanitize() {
  build_targets build-tests ember_cuda_tests || return
  local groups=("$@") g tool
  [ ${#groups[@]} -eq 0 ] && groups=(softmax reduce norm pool conv memory_format_device pool_layout_device)
  if ! command -v compute-sanitizer >/dev/null; then
    add_row sanitize "NOT RUN" "compute-sanitizer is not on PATH" 0
    return
  fi
  for g in "${groups[@]}"; do
    for tool in memcheck racecheck; do
      [ $tool = racecheck ] && ! grep -qwE 'softmax|reduce|norm|pool|pool_layout_device' <<<"$g" && continue
      if [ "$(left)" -lt 30 ]; then add_row "$tool $g" "NOT RUN" "time budget spent" 0; continue; fi
      run_sanitizer $tool "$g"
    done
  done
}

# ---- profile ----

phase_profile() {
  build_targets build-bench bench_cuda_ops || return
  if ! command -v ncu >/dev/null; then
    add_row profile "NOT RUN" "ncu is not on PATH" 0
    return
  fi
  local kernel t log rc
  for kernel in row_reduce_block_kernel softmax_rows_cached_kernel cross_entropy_cached_kernel; do
    if [ "$(left)" -lt 30 ]; then add_row "ncu $kernel" "NOT RUN" "time budget spent" 0; continue; fi
    t=$SECONDS
    log=$logdir/ncu-$kernel.log
    echo "==== gpu_check: ncu on $kernel ===="
    EMBER_BENCH_PEER=0 timeout -k 10 "$(limit 120)" ncu --clock-control none --target-processes application-only \
      -k "regex:$kernel" --launch-skip 3 --launch-count 1 --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --section Occupancy --section LaunchStats "$build/bin/bench_cuda_ops" --quick >"$log" 2>&1
    rc=$?
    grep -E '^  [^ ]|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per Thread|Block Size|Grid Size' \
      "$log" | head -n 12
    local figs
    figs=$(grep -E 'Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread' "$log" |
      awk '{printf "%s %s %s; ", $1, $(NF-1), $NF}' | sed -E 's/  +/ /g')
    if [ $rc -eq 0 ] && [ -n "$figs" ]; then add_row "ncu $kernel" ok "$figs" $((SECONDS - t))
    else add_row "ncu $kernel" FAILED "exit $rc, see $log" $((SECONDS - t)); fi
  done
}

# ---- run the phases, then the table ----

for p in "${phases[@]}"; do
  IFS=$'\x1f' read -r -a words <<<"$p"
  name=${words[0]}
  args=("${words[@]:1}")
  case $name in
    build)
      if [ ${#args[@]} -eq 0 ]; then
        args=(ember_cuda_tests bench_cuda_ops bench_gpu_train bench_mnist_train bench_data_parallel bench_nccl
              ember_torch_parity ember-train)
      fi
      build_targets build "${args[@]}" ;;
    test) phase_test "${args[@]}" ;;
    bench) phase_bench "${args[@]}" ;;
    sanitize) phase_sanitize "${args[@]}" ;;
    profile) phase_profile ;;
    list) phase_list ;;
  esac
done

summary() {
  echo
  echo "==== gpu_check summary: $(date -u +%Y-%m-%dT%H:%MZ), GPU: ${gpu:-none}, CUDA_LAUNCH_BLOCKING=${CUDA_LAUNCH_BLOCKING:-0}," \
       "$(elapsed) s ===="
  printf '%-26s %-20s %6s  %s\n' step result seconds detail
  local r
  for r in "${rows[@]}"; do
    IFS=$sep read -r n res det sec <<<"$r"
    printf '%-26s %-20s %6s  %s\n' "$n" "$res" "$sec" "$det"
  done
  [ $ran_bench = yes ] || return 0
  if [ -f "$logdir/bench_cuda_ops.log" ]; then
    echo "-- bench_cuda_ops"
    grep -E '^(op|-|cuda|add|sum|softmax|cross|adam|caching|alloc|check)' "$logdir/bench_cuda_ops.log" || true
  fi
  if [ -f "$logdir/bench_gpu_train.log" ]; then
    echo "-- bench_gpu_train (ember beside PyTorch)"
    sed -n '/^workload/,$p' "$logdir/bench_gpu_train.log"
  fi
  if [ -f "$logdir/bench_mnist_train.log" ]; then
    echo "-- bench_mnist_train (GPU part)"
    grep -iE 'gpu|cudnn|epoch|step' "$logdir/bench_mnist_train.log" | tail -n 12 || true
  fi
  if [ -f "$logdir/bench_data_parallel.log" ]; then
    echo "-- bench_data_parallel"
    cat "$logdir/bench_data_parallel.log"
  fi
  if [ -f "$logdir/ember_torch_parity.log" ]; then
    echo "-- ember_torch_parity --device cuda (ember beside PyTorch, step for step)"
    sed -n '/^case/,$p' "$logdir/ember_torch_parity.log"
  fi
  if [ -f "$logdir/bench_nccl.log" ]; then
    echo "-- bench_nccl"
    sed -n '/^size/,$p' "$logdir/bench_nccl.log"
  fi
}
summary_text=$(summary)
echo "$summary_text"
[ -n "$out_dir" ] && echo "$summary_text" >"$out_dir/gpu_check_summary.txt"
bad=0
for r in "${rows[@]}"; do
  case "$r" in *"${sep}ok${sep}"* | *"${sep}passed${sep}"* | *"${sep}passed, "*" skipped${sep}"*) ;; *) bad=1 ;; esac
done
# Let tee write the last lines (the table) before the call's output is collected.
if [ -n "$tee_pid" ]; then
  exec 1>&- 2>&-
  wait "$tee_pid" 2>/dev/null
fi
exit $bad
