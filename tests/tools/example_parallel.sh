#!/usr/bin/env bash
# Runs the examples on several devices, and their Slurm and HTCondor job files, as a user would, on
# this machine's CPU; one scenario per call (tests/tools/example_parallel.cmake).
#
#   example_parallel.sh CASE BIN_DIR SOURCE_DIR WORK_DIR
#
# BIN_DIR holds mnist, cifar and ember-run. Every run is small (512 training and 500 test images of
# Fashion-MNIST, one epoch), bounded by `timeout`, and its ranks talk over 127.0.0.1 only. Exit 77
# (skipped) when Fashion-MNIST is not installed (Debian package dataset-fashion-mnist).
#
# mnist_data_parallel   mnist --data-parallel --devices cpu,cpu trains and reports a test accuracy
# mnist_flags           bad combinations of the parallel flags are usage errors (exit 2) saying why
# mnist_ember_run       ember-run --nproc-per-node 2 mnist: DDP, world size 2, only rank 0 prints
#                       the epoch line and writes metrics and checkpoints; that checkpoint resumes
#                       in a single-process run
# cifar_ember_run       the same for cifar (cifar_cnn, with BatchNorm; --accumulation-steps 2) on
#                       generated images, 2 epochs; resuming from epoch 1's checkpoint under
#                       ember-run repeats epoch 2 exactly
# mnist_precision       --precision bf16 and fp16 train and report a test accuracy, fp16 also the loss
#                       scale and skipped steps (epoch line and --metrics-out); resuming fp16 from
#                       epoch 1's checkpoint repeats epoch 2 exactly, loss scale included; bf16 with
#                       --data-parallel trains; --precision fp8 is a usage error (exit 2);
#                       --metrics-out /dev/full (a full disk) fails the run naming the file
# mnist_precision_ember_run  ember-run --nproc-per-node 2 mnist --precision fp16: DDP ranks with the
#                       gradient scaler (skips agreed across ranks), rank 0 reports the loss scale
# slurm_one_node        examples/slurm/mnist_1node_4gpu.sbatch itself, run by bash with the variables
#                       sbatch would set (2 tasks instead of 4), a stand-in srun that starts the
#                       tasks here with SLURM_PROCID, SLURM_LOCALID, ... as srun does, and a
#                       stand-in scontrol; so the file's own commands and run_task.sh are what runs
# slurm_two_nodes       mnist_2nodes.sbatch the same way, as 2 nodes of 1 task
# slurm_two_nodes_ember_run  mnist_2nodes_ember_run.sbatch: one ember-run per "node", 1 rank each
# htcondor_job_script   examples/htcondor/mnist_job.sh with EMBER_BIN and NPROC_PER_NODE=2
set -u
case_name=$1
bin=$2
src=$3
work=$4
source "$(dirname "$0")/lib.sh"  # fresh_dir, fail, skip, clean_job_env
fresh_dir "$work"
clean_job_env
export EMBER_COLLECTIVE_TIMEOUT=60  # a rank that dies ends the others within a minute

data=${EMBER_TEST_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
needs_fashion_mnist() {
  if [ ! -f "$data/train-images-idx3-ubyte.gz" ] && [ ! -f "$data/train-images-idx3-ubyte" ]; then
    skip "no Fashion-MNIST in $data (Debian package dataset-fashion-mnist)"
  fi
}
common=(--data "$data" --epochs 1 --limit-train 512 --limit-test 500 --batch-size 16)
small=("${common[@]}" --device cpu)

# run RC CMD...: runs CMD (at most 150 s) with its output in $out, and checks its exit status.
run() {
  local want=$1 rc
  shift
  out=$(timeout -k 5 150 "$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | head -n 40
  [ "$rc" -eq "$want" ] || fail "exit status $rc, expected $want: $*"
}
# has REGEX [TEXT]: TEXT (default: the last run's output) matches the extended REGEX.
has() { grep -qE -- "$1" <<<"${2-$out}" || fail "the output lacks /$1/"; }
hasnt() { ! grep -qE -- "$1" <<<"${2-$out}" || fail "the output has /$1/"; }
epoch_line='epoch +1/1  train_loss [0-9.]+  test_loss [0-9.]+  test_acc [01][.][0-9]{4} '

# A DDP run's outputs: one metrics line and epoch_1.ckpt in $1, written by rank 0.
check_rank0_files() {
  [ "$(wc -l <"$1/metrics.jsonl")" -eq 1 ] || fail "metrics.jsonl does not have one line: $(cat "$1/metrics.jsonl")"
  grep -qE '"epoch": 1, .*"test_acc": [01][.][0-9]{4}' "$1/metrics.jsonl" || fail "metrics.jsonl: $(cat "$1/metrics.jsonl")"
  [ -f "$1/checkpoints/epoch_1.ckpt" ] || fail "no $1/checkpoints/epoch_1.ckpt"
}

# Stand-ins for srun and scontrol, in $work/fake-slurm (put first on PATH). The srun starts
# SLURM_NTASKS copies of its command, block-distributed over SLURM_NNODES "nodes" (all here), each
# with the per-task variables srun sets, its output in $FAKE_SRUN_LOGS/task_<rank>.log; when one
# fails it stops the others (as --kill-on-bad-exit does) and exits with that status.
make_fake_slurm() {
  mkdir -p fake-slurm
  cat >fake-slurm/srun <<'EOF'
#!/usr/bin/env bash
while [ $# -gt 0 ] && [[ $1 == -* ]]; do shift; done
n=$SLURM_NTASKS nodes=${SLURM_NNODES:-1}
per=$((n / nodes)) pids=() rc=0
for ((i = 0; i < n; i++)); do
  SLURM_PROCID=$i SLURM_LOCALID=$((i % per)) SLURM_NODEID=$((i / per)) SLURM_STEP_NODELIST=$SLURM_JOB_NODELIST \
    SLURM_STEP_NUM_TASKS=$n SLURM_STEP_TASKS_PER_NODE="$per(x$nodes)" "$@" >"$FAKE_SRUN_LOGS/task_$i.log" 2>&1 &
  pids+=($!)
done
# Each task's status as it ends, polled: `wait -n` (bash 5.2) can return 127 when a task ended
# before it was called, which failed a passing job once.
left=("${pids[@]}")
while [ ${#left[@]} -gt 0 ]; do
  still=()
  for p in "${left[@]}"; do
    if kill -0 "$p" 2>/dev/null; then
      still+=("$p")
      continue
    fi
    wait "$p"
    r=$?
    if [ "$r" -ne 0 ] && [ "$rc" -eq 0 ]; then
      rc=$r
      kill "${pids[@]}" 2>/dev/null
    fi
  done
  left=("${still[@]}")
  [ ${#left[@]} -eq 0 ] || sleep 0.05
done
exit "$rc"
EOF
  cat >fake-slurm/scontrol <<'EOF'
#!/usr/bin/env bash
[ "$1 $2" = "show hostnames" ] || { echo "fake scontrol: only 'show hostnames LIST'" >&2; exit 1; }
tr ',' '\n' <<<"$3"
EOF
  chmod +x fake-slurm/srun fake-slurm/scontrol
}

# A job id whose port (15000 + id % 20000, what the job files use) nothing listens on here.
free_job_id() {
  local id
  for _ in $(seq 100); do
    id=$((RANDOM % 20000 + 100000))
    (exec 3<>"/dev/tcp/127.0.0.1/$((15000 + id % 20000))") 2>/dev/null || { echo "$id"; return; }
  done
  echo 100000
}

# run_sbatch FILE NODES TASKS_PER_NODE [VAR=VALUE...]: runs examples/slurm/FILE with bash as sbatch
# would on NODES nodes (all 127.0.0.1), with the small run's flags as the script's arguments.
run_sbatch() {
  local file=$1 nodes=$2 per=$3
  shift 3
  make_fake_slurm
  mkdir -p logs
  # The tasks' logs are printed whatever the job's status (a failure is then diagnosable).
  trap 'for f in logs/task_*.log; do echo "--- $f"; cat "$f"; done' EXIT
  run 0 env PATH="$work/fake-slurm:$PATH" FAKE_SRUN_LOGS="$work/logs" SLURM_JOB_ID="$(free_job_id)" \
    SLURM_JOB_NODELIST="$(seq -s, -f '127.0.0.%g' 1 "$nodes")" SLURM_NNODES="$nodes" \
    SLURM_NTASKS=$((nodes * per)) SLURM_NTASKS_PER_NODE="$per" SLURM_TASKS_PER_NODE="$per(x$nodes)" \
    SLURM_CPUS_PER_TASK=1 SLURM_SUBMIT_DIR="$src" SLURM_PROCID=0 EMBER_BUILD="$(dirname "$bin")" \
    DATA="$data" RUN_DIR="$work/run" "$@" bash "$src/examples/slurm/$file" --limit-train 512 --limit-test 500 \
    --epochs 1 --batch-size 16 --device cpu
}

case $case_name in
  mnist_data_parallel)
    needs_fashion_mnist
    run 0 "$bin/mnist" "${common[@]}" --data-parallel --devices cpu,cpu
    has '^mnist: batch 16 split over cpu, cpu [(]DataParallel[)]'
    has "^$epoch_line"
    ;;

  mnist_flags)
    run 2 "$bin/mnist" --devices cpu,cpu
    has '^mnist: --devices lists the devices of --data-parallel: add --data-parallel'
    has '^usage: mnist'
    run 2 "$bin/mnist" --data-parallel=yes
    has "^mnist: --data-parallel takes no value, got 'yes'"
    run 2 "$bin/mnist" --data-parallel --devices cpu,tpu
    has "^mnist: --devices expects devices separated by commas .* got 'cpu,tpu'"
    run 2 "$bin/mnist" --data-parallel --device cpu
    has '^mnist: --device cpu and --data-parallel: give DataParallel.s devices with --devices'
    run 2 "$bin/mnist" --accumulation-steps 0
    has '^mnist: --accumulation-steps must be at least 1, got 0'
    # Under a launcher the process is a DDP rank: DataParallel on top is refused before any rendezvous.
    run 2 env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=1 "$bin/mnist" --data-parallel --devices cpu,cpu
    has '^mnist: --data-parallel splits batches over the devices of one process, but this process is rank 0 of 2 [(]torchrun variables[)]'
    # Without a GPU, --data-parallel alone says how to try it on the CPU (with one, it trains).
    needs_fashion_mnist
    out=$(timeout -k 5 150 "$bin/mnist" --data "$data" --data-parallel --epochs 1 --limit-train 64 --limit-test 64 2>&1)
    rc=$?
    printf '%s\n' "$out"
    if [ "$rc" -eq 2 ]; then
      has 'none is usable here .*pass --devices cpu,cpu to try it on the CPU'
    else
      [ "$rc" -eq 0 ] || fail "--data-parallel alone exited with $rc"
      has '^mnist: batch 32 split over cuda:0'
    fi
    run 0 "$bin/mnist" --help
    has '^  --data-parallel  '
    has 'ember-run --nproc-per-node 2 build/bin/mnist'
    ;;

  mnist_precision)
    run 2 "$bin/mnist" --precision fp8
    has "^mnist: --precision expects fp32, bf16 or fp16, got 'fp8'"
    has '^usage: mnist'
    run 0 "$bin/mnist" --help
    has '^  --precision P  '
    needs_fashion_mnist
    # DataParallel's replicas compute under the caller's autocast.
    run 0 "$bin/mnist" "${common[@]}" --precision bf16 --data-parallel --devices cpu,cpu
    has '^mnist: mixed precision bf16 [(]autocast; parameters in f32[)]$'
    has "^$epoch_line"
    run 0 "$bin/mnist" "${small[@]}" --precision bf16 --metrics-out bf16/metrics.jsonl
    has '^mnist: mixed precision bf16 [(]autocast; parameters in f32[)]$'
    has "^$epoch_line"
    hasnt 'scale [0-9]'
    grep -qE '"test_acc": [01][.][0-9]{4}, .*"eval_seconds": [0-9.]+}$' bf16/metrics.jsonl ||
      fail "bf16/metrics.jsonl: $(cat bf16/metrics.jsonl)"
    # A full disk under --metrics-out fails the run naming the file and the reason (issue 15: mnist
    # used to exit 0 having lost every line).
    if [ -w /dev/full ]; then
      run 1 "$bin/mnist" "${small[@]}" --metrics-out /dev/full
      has 'metrics-out /dev/full: cannot append the epoch.s line: No space left on device'
    fi
    ! grep -q loss_scale bf16/metrics.jsonl || fail "bf16/metrics.jsonl has a loss scale: $(cat bf16/metrics.jsonl)"
    echo "bf16: $(grep -oE 'test_acc [0-9.]+' <<<"$out")"
    # fp16, 2 epochs with checkpoints; then epoch 2 again from epoch 1's checkpoint.
    run 0 "$bin/mnist" "${small[@]}" --precision fp16 --epochs 2 --metrics-out fp16/metrics.jsonl \
      --checkpoint-dir fp16/checkpoints
    has '^mnist: mixed precision fp16 [(]autocast; parameters in f32; loss scale 65536[)]$'
    has "^epoch +1/2  train_loss [0-9.]+  test_loss [0-9.]+  test_acc [01][.][0-9]{4} .*  scale [0-9]+, [0-9]+ skipped$"
    full=$(grep -E '^epoch +2/2  train_loss' <<<"$out")
    echo "fp16: $(grep -oE 'test_acc [0-9.]+|scale [0-9]+, [0-9]+ skipped' <<<"$out" | tr '\n' ' ')"
    [ "$(wc -l <fp16/metrics.jsonl)" -eq 2 ] || fail "fp16/metrics.jsonl: $(cat fp16/metrics.jsonl)"
    grep -qE '"test_acc": [01][.][0-9]{4}, .*"loss_scale": [0-9]+, "skipped_steps": [0-9]+}$' fp16/metrics.jsonl ||
      fail "fp16/metrics.jsonl lacks loss_scale and skipped_steps: $(cat fp16/metrics.jsonl)"
    run 0 "$bin/mnist" "${small[@]}" --precision fp16 --epochs 2 --resume fp16/checkpoints/epoch_1.ckpt
    hasnt 'note: the checkpoint has no loss scale'
    resumed=$(grep -E '^epoch +2/2  train_loss' <<<"$out")
    # The same epoch 2: the same loss scale and skipped steps, and the same losses and accuracy up
    # to 0.01 (the CPU's f16 kernels may round differently from run to run under load: seen in the
    # 4th digit); only the timings may differ otherwise.
    scale_of() { grep -oE 'scale [0-9]+, [0-9]+ skipped$' <<<"$1"; }
    [ -n "$(scale_of "$full")" ] && [ "$(scale_of "$full")" = "$(scale_of "$resumed")" ] ||
      fail "epoch 2's loss scale differs after --resume: '$full' vs '$resumed'"
    awk -v a="$full" -v b="$resumed" 'BEGIN {
      n = split(a, x, " +"); split(b, y, " +")
      for (i = 1; i <= n; ++i)
        if (x[i] ~ /^(train_loss|test_loss|test_acc)$/ && (x[i+1] - y[i+1] > 0.01 || y[i+1] - x[i+1] > 0.01)) exit 1
    }' || fail "epoch 2 differs after --resume: '$full' vs '$resumed'"
    # An fp32 checkpoint resumed under fp16: the scaler starts afresh, and says so.
    run 0 "$bin/mnist" "${small[@]}" --checkpoint-dir fp32/checkpoints
    run 0 "$bin/mnist" "${small[@]}" --precision fp16 --epochs 2 --resume fp32/checkpoints/epoch_1.ckpt
    has 'note: the checkpoint has no loss scale [(]not an fp16 run[)]: the scale starts at 65536'
    ;;
  mnist_precision_ember_run)
    needs_fashion_mnist
    run 0 "$bin/ember-run" --nproc-per-node 2 "$bin/mnist" "${small[@]}" --precision fp16 \
      --metrics-out run/metrics.jsonl --checkpoint-dir run/checkpoints
    has '^\[rank 0\] mnist: DistributedDataParallel, world size 2 '
    has '^\[rank 0\] mnist: mixed precision fp16 [(]autocast; parameters in f32; loss scale 65536[)]$'
    has "^\[rank 0\] ${epoch_line}.*  scale [0-9]+, [0-9]+ skipped$"
    [ "$(grep -cE "^\[rank [0-9]\] epoch +[0-9]+/[0-9]+  train_loss" <<<"$out")" -eq 1 ] || fail "not exactly one epoch line"
    echo "fp16 DDP: $(grep -oE 'test_acc [0-9.]+|scale [0-9]+, [0-9]+ skipped' <<<"$out" | tr '\n' ' ')"
    check_rank0_files run
    grep -qE '"loss_scale": [0-9]+, "skipped_steps": [0-9]+}$' run/metrics.jsonl || fail "metrics.jsonl: $(cat run/metrics.jsonl)"
    ;;
  mnist_ember_run)
    needs_fashion_mnist
    run 0 "$bin/ember-run" --nproc-per-node 2 "$bin/mnist" "${small[@]}" --metrics-out run/metrics.jsonl \
      --checkpoint-dir run/checkpoints
    has '^\[rank 0\] mnist: DistributedDataParallel, world size 2 [(]torchrun variables; master 127[.]0[.]0[.]1:'
    has '^\[rank 0\] mnist: batch 16 per rank x 2 ranks = 32 [(]DistributedDataParallel over '
    has '^\[rank 1\] mnist: rank 1 of 2 on cpu'
    has "^\[rank 0\] $epoch_line"
    [ "$(grep -cE "^\[rank [0-9]\] epoch +[0-9]+/[0-9]+  train_loss" <<<"$out")" -eq 1 ] || fail "not exactly one epoch line"
    has 'mnist: mnist_cnn [(][0-9]+ parameters[)] on fashion-mnist [(]512 training, 500 test images[)], device cpu'
    check_rank0_files run
    # The checkpoint holds the plain model: a single-process run continues from it.
    run 0 "$bin/mnist" "${small[@]}" --epochs 2 --resume run/checkpoints/epoch_1.ckpt
    has 'note: the checkpoint was written by a run of 2 process[(]es[)], this one has 1'
    has '^mnist: resumed from run/checkpoints/epoch_1.ckpt: epochs done 1, global step 16$'
    has '^epoch +2/2 .* test_acc [01][.][0-9]{4} '
    ;;

  cifar_ember_run)
    cifar=("$bin/ember-run" --nproc-per-node 2 "$bin/cifar" --dataset synthetic --limit-train 256 --limit-test 128
      --epochs 2 --batch-size 32 --device cpu --workers 1 --accumulation-steps 2)
    run 0 "${cifar[@]}" --metrics-out run/metrics.jsonl --checkpoint-dir run/checkpoints
    has '^\[rank 0\] cifar: DistributedDataParallel, world size 2 '
    has '^\[rank 0\] cifar: SGD .*, cosine over 2 epochs [(]4 steps[)]'
    has '^\[rank 0\] cifar: batch 32 per rank x 2 ranks x 2 accumulation steps = 128 '
    has '^\[rank 0\] epoch +1/2  train_loss [0-9.]+  test_loss [0-9.]+  test_acc [01][.][0-9]{4} '
    hasnt '^\[rank 1\] epoch'
    [ "$(wc -l <run/metrics.jsonl)" -eq 2 ] || fail "metrics.jsonl does not have two lines: $(cat run/metrics.jsonl)"
    [ -f run/checkpoints/epoch_1.ckpt ] || fail "no run/checkpoints/epoch_1.ckpt"
    # Every rank resumes from rank 0's checkpoint: epoch 2 comes out as in the run that never stopped.
    run 0 "${cifar[@]}" --resume run/checkpoints/epoch_1.ckpt --metrics-out resumed.jsonl
    has '^\[rank 0\] cifar: resumed from run/checkpoints/epoch_1.ckpt: epochs done 1, global step 2$'
    strip() { sed -E 's/, "(epoch_seconds|images_per_second|eval_seconds)": [0-9.]+//g' "$1"; }
    [ "$(strip resumed.jsonl)" = "$(strip run/metrics.jsonl | tail -n 1)" ] ||
      fail "the resumed epoch 2 differs: $(cat run/metrics.jsonl resumed.jsonl)"
    ;;

  slurm_one_node)
    needs_fashion_mnist
    run_sbatch mnist_1node_4gpu.sbatch 1 2
    log0=$(cat logs/task_0.log) log1=$(cat logs/task_1.log)
    has '^run_task.sh: task 0 of 2 .*master 127[.]0[.]0[.]1:' "$log0"
    has '^mnist: DistributedDataParallel, world size 2 [(]slurm variables; master 127[.]0[.]0[.]1:' "$log0"
    has '^mnist: rank 0 of 2 on cpu [(]local rank 0 of 2, 1 kernel thread[(]s[)] from EMBER_NUM_THREADS[)]' "$log0"
    has "^$epoch_line" "$log0"
    has '^mnist: rank 1 of 2 on cpu [(]local rank 1 of 2' "$log1"
    hasnt '^epoch' "$log1"
    check_rank0_files run
    ;;

  slurm_two_nodes)
    needs_fashion_mnist
    run_sbatch mnist_2nodes.sbatch 2 1
    log0=$(cat logs/task_0.log) log1=$(cat logs/task_1.log)
    has '^mnist: DistributedDataParallel, world size 2 [(]slurm variables; master 127[.]0[.]0[.]1:' "$log0"
    has "^$epoch_line" "$log0"
    has '^mnist: rank 1 of 2 on cpu [(]local rank 0 of 1' "$log1"
    hasnt '^epoch' "$log1"
    check_rank0_files run
    ;;

  slurm_two_nodes_ember_run)
    needs_fashion_mnist
    run_sbatch mnist_2nodes_ember_run.sbatch 2 1 NPROC_PER_NODE=1
    log0=$(cat logs/task_0.log) log1=$(cat logs/task_1.log)
    has '^\[rank 0\] mnist: DistributedDataParallel, world size 2 [(]torchrun variables; master 127[.]0[.]0[.]1:' "$log0"
    has "^\[rank 0\] $epoch_line" "$log0"
    has '^\[rank 1\] mnist: rank 1 of 2 on cpu [(]local rank 0 of 1' "$log1"
    hasnt 'epoch +1/1' "$log1"
    check_rank0_files run
    ;;

  htcondor_job_script)
    needs_fashion_mnist
    run 0 env EMBER_BIN="$bin" NPROC_PER_NODE=2 "$src/examples/htcondor/mnist_job.sh" "${small[@]}" \
      --metrics-out run/metrics.jsonl --checkpoint-dir run/checkpoints
    has '^mnist_job.sh: on .*, programs in '
    has '^\[rank 0\] mnist: DistributedDataParallel, world size 2 '
    has "^\[rank 0\] $epoch_line"
    hasnt '^\[rank 1\] epoch'
    check_rank0_files run
    ;;

  *) fail "unknown case '$case_name'" ;;
esac
echo "PASS: $case_name"
