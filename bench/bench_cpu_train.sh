#!/usr/bin/env bash
# CPU training throughput beside PyTorch (issue 16): mnist_cnn on Fashion-MNIST, Adam lr 1e-3,
# dropout, one epoch over the first --limit training images, then evaluation of the first
# --test-limit test images at batch 1000; ember (ember-train, configs/mnist_cnn.json) and the PyTorch
# peer (bench/peers/torch_mnist.py, the same network and recipe) run interleaved, A B A B ..., at
# each batch size, --repeats times each. Both use every core of the machine (nproc threads).
# ember's images come as the config says (resident: the dataset as one tensor, batches gathered
# from it, as the peer does), or with --loader workers as build/bin/mnist on a CPU takes them: one
# DataLoader worker thread collating each batch beside the training threads.
#
#   bench/bench_cpu_train.sh [--build DIR] [--python PY] [--limit N] [--test-limit M] [--repeats R]
#                            [--batches "16 32 64 128"] [--loader resident|workers] [--isa avx2]
#
# --isa avx2 limits both programs' libraries to AVX2 and FMA on an AVX-512 CPU (bench/cpu_isa.h
# says which variables and why; this script sets the same five).
#
# Prints, per batch size, the median, min and max training images/s of each, the spread (max/min)
# and ember's median over PyTorch's; then the same for evaluation images/s. The targets of issue 16:
# ratio >= 1.2 at every batch size, ember's spread <= 1.15 where PyTorch's is <= 1.1. Without torch
# (--python: an interpreter with it; default python3) the peer columns say so and ember runs alone.
set -u
build=build
python=python3
limit=8000
test_limit=2000
repeats=5
batches="16 32 64 128"
loader=resident
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --test-limit) test_limit=$2; shift 2 ;;
  --repeats) repeats=$2; shift 2 ;;
  --batches) batches=$2; shift 2 ;;
  --loader) loader=$2; shift 2 ;;
  --isa)
    [ "$2" = avx2 ] || { echo "bench_cpu_train: --isa takes avx2, not '$2'" >&2; exit 2; }
    grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo ||
      { echo "bench_cpu_train: --isa avx2: this CPU has no AVX2 and FMA to be limited to" >&2; exit 2; }
    export EMBER_BENCH_ISA=avx2 OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 \
      DNNL_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
    shift 2 ;;
  -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
  *) echo "bench_cpu_train: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "bench_cpu_train: SKIPPED: no $data (apt-get install dataset-fashion-mnist)" >&2; exit 77; }
[ -x "$build/bin/ember-train" ] || { echo "bench_cpu_train: no $build/bin/ember-train (build first)" >&2; exit 1; }
case $loader in
resident) loader_args=(data.resident=true data.workers=0) ;;
workers) loader_args=(data.resident=false data.workers=1) ;;
*) echo "bench_cpu_train: --loader must be resident or workers, not '$loader'" >&2; exit 2 ;;
esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
have_torch=0
"$python" -c 'import torch' 2>/dev/null && have_torch=1
threads=$(nproc)

# The value of "key" in the last line of a metrics.jsonl.
last() { tail -n 1 "$1" | sed -E "s/.*\"$2\":([^,}]*).*/\\1/"; }
# "median min max spread" of the numbers on stdin.
stats() {
  sort -g | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "- - - -"; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.0f %.0f %.0f %.2f\n", m, v[1], v[NR], v[NR] / v[1] }'
}

run_ember() {  # batch, run number -> "train_ips eval_ips"
  local dir=$work/ember-$1-$2
  "$build/bin/ember-train" "$root/configs/mnist_cnn.json" device=cpu epochs=1 "data.limit_train=$limit" \
    "data.limit_test=$test_limit" "data.batch_size=$1" "${loader_args[@]}" early_stop.target_accuracy=null \
    checkpoint.every_epochs=0 \
    "output.run_dir=$dir" >"$dir.log" 2>&1 || { cat "$dir.log" >&2; exit 1; }
  local ips eval_s
  ips=$(last "$dir/metrics.jsonl" images_per_second)
  eval_s=$(last "$dir/metrics.jsonl" eval_seconds)
  awk -v a="$ips" -v e="$eval_s" -v n="$test_limit" 'BEGIN { printf "%s %.1f\n", a, n / e }'
}

run_torch() {  # batch -> "train_ips eval_ips"
  local out
  out=$(OMP_NUM_THREADS=$threads "$python" "$here/peers/torch_mnist.py" --data "$data" --limit "$limit" --epochs 1 \
    --batch "$1" --test-limit "$test_limit") || { echo "bench_cpu_train: the PyTorch peer failed" >&2; exit 1; }
  echo "$(sed -n 's/RESULT images_per_second=//p' <<<"$out") $(sed -n 's/RESULT eval_images_per_second=//p' <<<"$out")"
}

echo "machine: $(nproc) cores, $(uname -n); one epoch over $limit images, eval over $test_limit at batch 1000;" \
  "$repeats runs each, interleaved ember/PyTorch; ember's loader: $loader"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), AVX-512: $(grep -qw avx512f /proc/cpuinfo && echo yes || echo no)${EMBER_BENCH_ISA:+, both programs limited to AVX2 (--isa avx2)}"
[ "$have_torch" = 1 ] && echo "peer: PyTorch $("$python" -c 'import torch; print(torch.__version__, "(ATen " + torch.backends.cpu.get_cpu_capability() + ")")'), $threads threads" ||
  echo "peer: not measured: $python has no torch (pip install torch in a venv outside the repo; --python)"
train_rows=()
eval_rows=()
for b in $batches; do
  : >"$work/e_train" && : >"$work/e_eval" && : >"$work/t_train" && : >"$work/t_eval"
  for r in $(seq 1 "$repeats"); do
    read -r et ee <<<"$(run_ember "$b" "$r")"
    echo "$et" >>"$work/e_train" && echo "$ee" >>"$work/e_eval"
    line="batch $b run $r: ember $(printf %.0f "$et") img/s (eval $(printf %.0f "$ee"))"
    if [ "$have_torch" = 1 ]; then
      read -r tt te <<<"$(run_torch "$b")"
      echo "$tt" >>"$work/t_train" && echo "$te" >>"$work/t_eval"
      line="$line, pytorch $(printf %.0f "$tt") img/s (eval $(printf %.0f "$te"))"
    fi
    echo "$line"
  done
  train_rows+=("$b $(stats <"$work/e_train") $(stats <"$work/t_train")")
  eval_rows+=("$b $(stats <"$work/e_eval") $(stats <"$work/t_eval")")
done

table() {  # title, rows...
  echo
  echo "$1"
  printf '%5s | %7s %7s %7s %6s | %7s %7s %7s %6s | %5s\n' batch median min max spread median min max spread ratio
  printf '%5s | %30s | %30s |\n' "" "ember images/s" "PyTorch images/s"
  shift
  for row in "$@"; do
    awk -v row="$row" 'BEGIN {
      split(row, f, " ")
      ratio = (f[6] == "-") ? "-" : sprintf("%.2f", f[2] / f[6])
      printf "%5s | %7s %7s %7s %6s | %7s %7s %7s %6s | %5s\n", f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], ratio }'
  done
}
table "training, one epoch (targets: ratio >= 1.2, ember spread <= 1.15)" "${train_rows[@]}"
table "evaluation, batch 1000" "${eval_rows[@]}"
