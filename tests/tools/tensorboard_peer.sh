#!/usr/bin/env bash
# ember-train's TensorBoard event files read by the tensorboard package's own reader (PyPI
# `tensorboard`; tests/peer/tensorboard_reader.py), as tests/tools/tensorboard_peer.cmake runs it:
#
#   tensorboard_peer.sh EMBER_TRAIN WORK_DIR READER_PY [CIFAR]
#
# The Python is EMBER_TB_PYTHON, else EMBER_PEER_PYTHON, else python3; without tensorboard there
# the test is skipped (exit 77) saying so (CI has no tensorboard).
#   1. A 3-epoch run with output.tensorboard=true: every scalar tag equals metrics.jsonl's value
#      (rounded to float32) at step epoch x 6, and the HParams hold the config's keys.
#   2. SIGTERM after epoch 1 (exit 143): the file reads, and holds exactly the epochs in metrics.jsonl.
#   3. The event file of 1 cut inside its last record (a writer killed mid-write): it reads without
#      an error up to the last whole record (one event fewer).
#   4. The whole run resumed from its epoch-2 checkpoint: the resume drops epoch 3's events from
#      the first file, the new session writes them again, and the files read as one run holding
#      every epoch once; each finished session ends with session_end_info STATUS_SUCCESS.
#   5. With CIFAR (examples/cifar): --tensorboard DIR writes a file whose tags equal the run's
#      metrics at step epoch x 2 (128 images in batches of 64), the flags as hparams.
set -u
prog=$1
work=$2
reader=$3
cifar=${4:-}
source "$(dirname "$0")/lib.sh"  # fresh_dir, fail, skip, clean_job_env
fresh_dir "$work"
clean_job_env

py=${EMBER_TB_PYTHON:-${EMBER_PEER_PYTHON:-python3}}
why=$("$py" -c 'import tensorboard' 2>&1) || skip "no tensorboard in $py (set EMBER_TB_PYTHON to a Python with the tensorboard package): $(tail -n 1 <<<"$why")"

# cifar_cnn on synthetic images, 6 steps of 16 per epoch on the CPU.
cat >c.json <<'JSON'
{
  "name": "tb", "device": "cpu", "seed": 5, "epochs": 3,
  "model": {"name": "cifar_cnn"},
  "data": {"dataset": "synthetic", "limit_train": 96, "limit_test": 32, "batch_size": 16, "test_batch_size": 32,
           "workers": 1},
  "optim": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
  "schedule": {"name": "cosine"},
  "output": {"log_interval": 0.5, "tensorboard": true}
}
JSON

# 1. a whole run
"$prog" c.json output.run_dir=runs/whole >whole.out 2>&1 || { cat whole.out; fail "ember-train exited with $?"; }
grep -q 'TensorBoard: events.out.tfevents.* in the run directory' whole.out || fail "no TensorBoard line: $(cat whole.out)"
"$py" "$reader" check runs/whole 6 --hparam optim.lr=0.02 --hparam precision=fp32 --hparam data.augment=false \
  --hparam model.name=cifar_cnn --hparam resolved.global_batch_size=16 --status success ||
  fail "the whole run's event file"

# 2. SIGTERM after the first epoch
"$prog" c.json output.run_dir=runs/term >term.out 2>&1 &
pid=$!
for _ in $(seq 1 2400); do
  [ -s runs/term/metrics.jsonl ] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.05
done
[ -s runs/term/metrics.jsonl ] || fail "no metrics line appeared before the run ended or 120 s passed"
kill -TERM "$pid"
wait "$pid"
rc=$?
[ "$rc" -eq 143 ] || { cat term.out; fail "after SIGTERM ember-train exited with $rc, expected 143"; }
epochs=$(grep -c . runs/term/metrics.jsonl)
echo "SIGTERM after $epochs epoch(s)"
"$py" "$reader" check runs/term 6 --status none || fail "the SIGTERMed run's event file"

# 3. cut inside the last record
file=$(ls runs/whole/events.out.tfevents.*)
n=$("$py" "$reader" count "$file") || fail "counting the events of $file"
size=$(stat -c %s "$file")
head -c $((size - 5)) "$file" >cut.tfevents
"$py" "$reader" truncated cut.tfevents $((n - 1)) || fail "the cut file"

# 4. resumed from epoch 2 (after 3's cut copy: it reads the whole run's single file)
"$prog" c.json output.run_dir=runs/whole checkpoint.resume=runs/whole/checkpoints/epoch_2.ckpt >resume.out 2>&1 ||
  { cat resume.out; fail "the resumed ember-train exited with $?"; }
grep -q 'TensorBoard: dropped [1-9][0-9]* events after global step 12' resume.out || fail "no drop line: $(cat resume.out)"
[ "$(ls runs/whole/events.out.tfevents.* | wc -l)" -eq 2 ] || fail "expected 2 event files: $(ls runs/whole)"
"$py" "$reader" check runs/whole 6 --hparam optim.lr=0.02 --status success || fail "the resumed run's event files"

# 5. the example's --tensorboard
if [ -n "$cifar" ]; then
  "$cifar" --dataset synthetic --limit-train 128 --limit-test 64 --epochs 2 --batch-size 64 --model cifar_cnn \
    --device cpu --tensorboard ex/tb >cifar.out 2>&1 || { cat cifar.out; fail "cifar --tensorboard exited with $?"; }
  # The reader compares with ex/tb/metrics.jsonl: the trainer's own line for each epoch, from the log.
  sed -nE 's/^epoch +([0-9]+)\/2  train_loss .* test_acc ([0-9.]+).*/{"epoch": \1, "test_acc": \2}/p' cifar.out \
    >ex/tb/metrics.jsonl
  [ "$(grep -c . ex/tb/metrics.jsonl)" -eq 2 ] || fail "cifar printed no 2 epoch lines: $(cat cifar.out)"
  "$py" "$reader" check ex/tb 2 --only accuracy/test_acc --tolerance 1e-4 --hparam model=cifar_cnn \
    --hparam batch_size=64 --hparam precision=fp32 --hparam channels_last=false || fail "cifar's event file"
fi
echo "OK"
