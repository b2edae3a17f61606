#!/usr/bin/env bash
# DDP overhead on one machine: mnist_cnn training throughput with DistributedDataParallel over 2
# processes of 1 thread each (global batch 64) beside one process of 2 threads (batch 64), for ember
# (ember-train under ember-run, tcp backend) and for PyTorch (the same network and recipe under
# torchrun, gloo backend) in the same run, alternating, `--repeats` times. Also ember's share of
# all-reduce time hidden behind backward (1 - exposed / comm, from metrics.jsonl) and the
# `ember-report --scaling` table of the last pair of ember runs.
#
#   bench/bench_ddp_mnist.sh [--build DIR] [--python PY] [--limit N] [--epochs E] [--repeats R]
#
# Figures are the last epoch's images/s (the first is warm-up). Data: Fashion-MNIST from the Debian
# package dataset-fashion-mnist. --python: an interpreter with torch (default: python3; without
# torch the peer rows say so). The targets of issue 13: DDP >= 90% of one process, hidden >= 50%.
set -u
build=build
python=python3
limit=8000
epochs=2
repeats=2
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --python) python=$2; shift 2 ;;
  --limit) limit=$2; shift 2 ;;
  --epochs) epochs=$2; shift 2 ;;
  --repeats) repeats=$2; shift 2 ;;
  -h | --help) sed -n '2,14p' "$0"; exit 0 ;;
  *) echo "bench_ddp_mnist: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
data=/usr/share/datasets/fashion-mnist
[ -d "$data" ] || { echo "bench_ddp_mnist: no $data (apt-get install dataset-fashion-mnist)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
have_torch=0
"$python" -c 'import torch' 2>/dev/null && have_torch=1

common=(device=cpu "epochs=$epochs" "data.limit_train=$limit" data.limit_test=1000 early_stop.target_accuracy=null
  checkpoint.every_epochs=0)
last() { tail -n 1 "$1" | sed -E "s/.*\"$2\":([^,}]*).*/\\1/"; }

echo "machine: $(nproc) cores, $(uname -n); $limit images, $epochs epochs, last epoch's images/s"
printf '%-6s %-8s %14s %14s %8s %8s %9s %9s\n' run peer "1 proc x 2 thr" "2 proc x 1 thr" ratio comm_s exposed_s hidden
for r in $(seq 1 "$repeats"); do
  one=$work/one-$r
  two=$work/two-$r
  EMBER_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 "$build/bin/ember-train" "$root/configs/mnist_cnn.json" \
    "${common[@]}" data.batch_size=64 "output.run_dir=$one" >"$work/one-$r.log" 2>&1 ||
    { cat "$work/one-$r.log"; exit 1; }
  "$build/bin/ember-run" --nproc-per-node 2 "$build/bin/ember-train" "$root/configs/mnist_cnn.json" "${common[@]}" \
    data.batch_size=32 parallel.mode=ddp "output.run_dir=$two" >"$work/two-$r.log" 2>&1 ||
    { cat "$work/two-$r.log"; exit 1; }
  a=$(last "$one/metrics.jsonl" images_per_second)
  b=$(last "$two/metrics.jsonl" images_per_second)
  c=$(last "$two/metrics.jsonl" comm_seconds)
  e=$(last "$two/metrics.jsonl" comm_exposed_seconds)
  awk -v r="$r" -v a="$a" -v b="$b" -v c="$c" -v e="$e" 'BEGIN {
    printf "%-6s %-8s %14.0f %14.0f %7.1f%% %8.2f %9.2f %8.0f%%\n", r, "ember", a, b, 100 * b / a, c, e, 100 * (1 - e / c) }'
  if [ "$have_torch" = 1 ]; then
    targs=(--data "$data" --limit "$limit" --epochs "$epochs")
    ta=$(OMP_NUM_THREADS=2 "$python" "$here/peers/torch_mnist.py" "${targs[@]}" --batch 64 | sed -n 's/RESULT images_per_second=//p')
    tb=$(OMP_NUM_THREADS=1 "$python" -m torch.distributed.run --nproc-per-node 2 "$here/peers/torch_mnist.py" \
      "${targs[@]}" --batch 32 --ddp 2>/dev/null | sed -n 's/RESULT images_per_second=//p')
    awk -v r="$r" -v a="$ta" -v b="$tb" 'BEGIN {
      printf "%-6s %-8s %14.0f %14.0f %7.1f%% %8s %9s %9s\n", r, "pytorch", a, b, 100 * b / a, "-", "-", "-" }'
  else
    printf '%-6s %-8s %s\n' "$r" pytorch "not measured: $python has no torch (pip install torch in a venv; --python)"
  fi
done
echo
"$build/bin/ember-report" --scaling "$work/one-$repeats" "$work/two-$repeats" --out "$work/report" | sed -n '1,6p'
