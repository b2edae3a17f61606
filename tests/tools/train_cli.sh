#!/usr/bin/env bash
# Runs build/bin/ember-train as a user would; one scenario per call (tests/tools/train.cmake).
#
#   train_cli.sh CASE EMBER_TRAIN WORK_DIR
#
# usage          no config, an unknown option (naming the key.path=value override a flag like
#                --epochs meant), a stray argument -> exit 2 with the usage; --help -> 0
# bad_config     an unknown key, a mistyped override, missing data files, WORLD_SIZE without RANK, a
#                DataParallel device not here -> exit 2 naming the key path / directory / variable, no run
#                directory written, no source location (EMBER_DEBUG=1 adds it)
# rerun          a named run directory that holds a run is refused before any work (exit 2, naming
#                checkpoint.resume=auto and output.run_dir=NEW_DIR); <run>/config.json runs again in a new
#                directory with the same metrics; a failed resume ends log.txt with the error
# print_config   --print-config with overrides prints the resolved config; that output is itself a
#                config ember-train reads back to the same text, and it shows the overrides
# sigterm        SIGTERM once epoch 1 is in metrics.jsonl -> exit 143, checkpoints/last.ckpt and a
#                summary with stop_reason "signal"; checkpoint.resume=auto then finishes with the
#                same per-epoch losses, accuracies and learning rates as an uninterrupted run
# ddp_sigterm    the same with parallel.mode=ddp on 2 processes under ember-run (EMBER_RUN; without
#                parallel.mode=ddp the ranks refuse to train alone): one run
#                directory, written by rank 0; SIGTERM to ember-run reaches both ranks, which stop
#                after the same step; resume=auto on 2 processes matches the uninterrupted DDP run
# ddp_restart    ember-run --max-restarts 1 over a 2-process DDP run with checkpoint.resume=auto: rank 1
#                SIGKILLed after epoch 1; every rank restarts, resumes, and the run ends (exit 0) with
#                the uninterrupted run's metrics; the restart is in the log and summary.json
# ddp_global_batch  data.global_batch_size=32 with optim.lr_scaling=linear on 2 processes: 16 per
#                rank, lr 0.02 x 32/16 = 0.04 printed and in config.json's "resolved", summary.json and
#                metrics.jsonl; parallel.sync_batchnorm=true says how many BatchNorm2d layers it syncs;
#                that config.json runs again (on one process, where SyncBatchNorm does nothing, saying
#                so); 33 is refused (exit 2) naming the numbers
# profile        profile.enabled=true: profile/trace.json holds ember's own spans (ops, backward
#                nodes, the optimizer step) of batches 3-5 only, and profile/ops.md their table
# profile_ddp    the same on 2 processes under ember-run: one profile/trace.json, written by rank 0, with
#                a process row per rank (pid 0 and 1, "rank 0" and "rank 1"), each with its ops, backward
#                nodes and all-reduces, and rank 1's clock offset within its residual of 0 (one machine)
# ddp_zero       parallel.zero=1 on 2 processes: the same metrics as plain DDP bit for bit, also after a
#                resume from epoch 1 (the checkpoint holds the whole, consolidated optimizer state)
# dp             parallel.mode=dp over cpu,cpu: trains, says how the batch is split, world_size 2;
#                a bad device in the list -> exit 2 naming the key
# ddp_accuracy   mnist_cnn on a Fashion-MNIST slice: DDP on 2 processes (batch 32 each) reaches the
#                test accuracy of one process at batch 64 within 1%; rank 1 prints no epoch lines
#                (skipped, exit 77, without the dataset)
# nonfinite      optim.lr=1e9 makes the loss overflow in epoch 1: exit 1 naming the epoch and batch,
#                no metrics line and no checkpoint for that epoch; train.on_nonfinite=skip trains on,
#                not taking those steps, and reports them (epoch line, nonfinite_steps)
# ddp_nonfinite  the same on 2 processes under ember-run: the ranks agree, both stop (ember-run exits
#                non-zero, nothing written for the epoch) or both skip the same steps (no hang)
# amp_accuracy   the same slice in precision fp32, bf16 and fp16 (loss scaler): bf16 and fp16 reach
#                fp32's test accuracy within 1%; fp16 reports its loss scale (skipped without data)
set -u
case_name=$1
prog=$2
work=$3
ember_run=${4:-}
source "$(dirname "$0")/lib.sh"  # fresh_dir, fail, skip, clean_job_env
fresh_dir "$work"

# expect RC REGEX CMD...: runs CMD, checks its exit status and that stdout+stderr match REGEX.
expect() {
  local want_rc=$1 regex=$2
  shift 2
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  printf '%s\n' "$out" | head -n 30
  [ "$rc" -eq "$want_rc" ] || fail "'$*' exited with $rc, expected $want_rc"
  grep -qE -- "$regex" <<<"$out" || fail "the output of '$*' does not match /$regex/"
}

# A small run: cifar_cnn on synthetic CIFAR-shaped images, 6 steps of 16 per epoch on the CPU.
write_tiny_config() {
  cat >"$1" <<'EOF'
{
  "name": "cli",
  "device": "cpu",
  "seed": 5,
  "epochs": 2,
  "model": {"name": "cifar_cnn", "dropout": 0.25},
  "data": {"dataset": "synthetic", "limit_train": 96, "limit_test": 32, "batch_size": 16,
           "test_batch_size": 32, "workers": 1, "augment": true},
  "optim": {"name": "sgd", "lr": 0.02, "momentum": 0.9},
  "schedule": {"name": "cosine"},
  "output": {"log_interval": 0.5}
}
EOF
}

# The columns of metrics.jsonl that do not measure time, one epoch per line.
numbers() {
  sed -E 's/.*"epoch":([0-9]+),"train_loss":([^,]*),"test_loss":([^,]*),"test_acc":([^,]*),.*"lr":([^,]*),.*/\1 \2 \3 \4 \5/' "$1"
}

# same_metrics A B "1 2 ": run B's metrics.jsonl holds exactly those epochs, with run A's losses,
# accuracies and learning rates, bit for bit (a resumed or restarted B against an uninterrupted A).
same_metrics() {
  numbers "$1/metrics.jsonl" >"$1.txt"
  numbers "$2/metrics.jsonl" >"$2.txt"
  cat "$1.txt" "$2.txt"
  [ "$(cut -d' ' -f1 "$2.txt" | tr '\n' ' ')" = "$3" ] || fail "$2/metrics.jsonl epochs are not exactly $3"
  cmp -s "$1.txt" "$2.txt" || fail "the metrics of $2 differ from the uninterrupted run's"
}

case "$case_name" in
usage)
  expect 2 'missing the config file' "$prog"
  expect 2 "unknown option '--bogus'" "$prog" c.json --bogus
  # A flag where an override is meant: the message writes the override (key path found by its last part).
  expect 2 "unknown option '--epochs': settings are overrides written key.path=value, here epochs=1$" \
    "$prog" c.json --epochs 1
  expect 2 "here optim\.lr=0\.1$" "$prog" c.json --lr=0.1
  expect 2 "here data\.batch_size=VALUE$" "$prog" c.json --batch-size
  expect 2 "unexpected argument 'stray'" "$prog" c.json stray
  expect 0 'usage: ember-train CONFIG.json' "$prog" --help
  expect 0 'optim\.lr' "$prog" --help
  ;;
bad_config)
  echo '{"name": "bad", "optim": {"lrr": 0.1}}' >bad.json
  expect 2 'optim\.lrr' "$prog" bad.json
  write_tiny_config ok.json
  expect 2 'epochs' "$prog" ok.json epochs=ten
  expect 2 "no-such-file.json" "$prog" no-such-file.json
  expect 2 "$work/no-data" "$prog" ok.json data.dataset=mnist "data.path=$work/no-data" "model.name=mnist_cnn" \
    "output.dir=$work/runs"
  # A launcher that set only part of its variables: an error naming both, not a run alone.
  expect 2 'RANK is not set but WORLD_SIZE=2 is' env WORLD_SIZE=2 "$prog" ok.json parallel.mode=ddp \
    "output.dir=$work/runs"
  # DataParallel over a device this machine does not have.
  expect 2 'parallel\.devices: cuda:9' "$prog" ok.json parallel.mode=dp parallel.devices=cpu,cuda:9 \
    "output.dir=$work/runs"
  [ ! -e "$work/runs" ] || fail "a failed validation created the run directory parent $work/runs"
  # Errors are the user's line; EMBER_DEBUG=1 adds the source location of the check.
  out=$(env WORLD_SIZE=2 "$prog" ok.json 2>&1)
  ! grep -qE '^ +at [a-z_]+/' <<<"$out" || fail "an input error printed a source location: $out"
  out=$(env EMBER_DEBUG=1 WORLD_SIZE=2 "$prog" ok.json 2>&1)
  grep -qE '^ +at parallel/env\.cpp:[0-9]+' <<<"$out" || fail "EMBER_DEBUG=1 printed no source location: $out"
  ;;
rerun)
  write_tiny_config c.json
  "$prog" c.json epochs=1 output.run_dir=first >first.out 2>&1 || fail "the first run exited with $?"
  cp first/metrics.jsonl before.jsonl
  # Starting afresh in it is refused before any work, naming both ways on, and changes nothing.
  expect 2 "output.run_dir 'first' already holds a run .*checkpoint\.resume=auto.*output\.run_dir=NEW_DIR" \
    "$prog" c.json epochs=1 output.run_dir=first
  cmp -s before.jsonl first/metrics.jsonl || fail "the refused run changed first/metrics.jsonl"
  # The run's config.json runs the experiment again, in a new directory under output.dir.
  expect 0 'epoch 1/1' "$prog" first/config.json output.dir=again
  again=$(ls -d again/cli-* 2>/dev/null | head -n 1)
  [ -s "$again/metrics.jsonl" ] || fail "no run directory with metrics under again/: $(ls -R again 2>&1)"
  numbers first/metrics.jsonl >first.txt
  numbers "$again/metrics.jsonl" >again.txt
  cmp -s first.txt again.txt || fail "the re-run's metrics differ: $(cat first.txt again.txt)"
  # A failure once the run directory is open ends its log.txt with the error (here a resume with
  # another model: exit 1, the run left as it was).
  expect 1 'wide_resnet' "$prog" c.json epochs=2 output.run_dir=first checkpoint.resume=auto model.name=wide_resnet \
    model.depth=10 model.widen=1
  tail -n 1 first/log.txt | grep -qE 'error: .*wide_resnet' || fail "log.txt does not end with the error: $(tail -n 3 first/log.txt)"
  cmp -s before.jsonl first/metrics.jsonl || fail "the failed resume changed first/metrics.jsonl"
  ;;
print_config)
  write_tiny_config c.json
  "$prog" c.json optim.lr=0.125 'schedule.milestones=[3,4]' epochs=7 --print-config >printed.json ||
    fail "--print-config exited with $?"
  cat printed.json
  grep -qE '"lr": 0\.125' printed.json || fail "the printed config lacks the override optim.lr=0.125"
  grep -qE '"epochs": 7' printed.json || fail "the printed config lacks the override epochs=7"
  "$prog" printed.json --print-config >again.json || fail "ember-train cannot read its own --print-config output"
  cmp -s printed.json again.json || fail "--print-config of the printed config differs from it"
  [ ! -e runs ] || fail "--print-config created a run directory"
  ;;
sigterm)
  write_tiny_config c.json
  "$prog" c.json output.run_dir=straight >straight.out 2>&1 || fail "the uninterrupted run exited with $?"

  "$prog" c.json output.run_dir=run >interrupted.out 2>&1 &
  pid=$!
  for _ in $(seq 1 2400); do
    [ -s run/metrics.jsonl ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -s run/metrics.jsonl ] || fail "no metrics line appeared before the run ended or 120 s passed"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  cat interrupted.out
  [ "$rc" -eq 143 ] || fail "after SIGTERM ember-train exited with $rc, expected 143"
  grep -q 'received SIGTERM: wrote checkpoints/last.ckpt at epoch' interrupted.out ||
    fail "no 'received SIGTERM' message"
  [ -s run/checkpoints/last.ckpt ] || fail "no checkpoints/last.ckpt after SIGTERM"
  grep -qE '"stop_reason": "signal"' run/summary.json || fail "summary.json does not say stop_reason signal"

  "$prog" c.json output.run_dir=run checkpoint.resume=auto >resumed.out 2>&1 || fail "the resumed run exited with $?"
  cat resumed.out
  grep -q 'resumed from' resumed.out || fail "the second run did not resume"
  grep -qE '"stop_reason": "completed"' run/summary.json || fail "the resumed run's summary is not completed"
  grep -qE '"epochs_run": 2' run/summary.json || fail "the resumed run's summary does not count 2 epochs"
  same_metrics straight run "1 2 "
  ;;
ddp_sigterm)
  write_tiny_config c.json
  ddp=(parallel.mode=ddp epochs=3 data.limit_train=192)
  # Without a launcher a ddp config trains as one process and says so.
  expect 0 'parallel.mode ddp without a launcher: training as one process' "$prog" c.json parallel.mode=ddp epochs=1 \
    output.run_dir=plain
  rm -rf plain
  # Two ranks that would each train alone (and write one directory twice) are refused.
  out=$("$ember_run" --nproc-per-node 2 "$prog" c.json output.run_dir=alone 2>&1)
  [ $? -ne 0 ] || fail "ember-train without parallel.mode=ddp under ember-run --nproc-per-node 2 succeeded"
  grep -qE 'rank [01] of 2 \(torchrun variables\) but parallel.mode is none: set parallel.mode=ddp' <<<"$out" ||
    fail "no error naming parallel.mode: $out"
  rm -rf alone
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" output.run_dir=straight >straight.out 2>&1 ||
    fail "the uninterrupted DDP run exited with $?"
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" output.run_dir=run >interrupted.out 2>&1 &
  pid=$!
  for _ in $(seq 1 2400); do
    [ -s run/metrics.jsonl ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -s run/metrics.jsonl ] || fail "no metrics line appeared before the run ended or 120 s passed"
  kill -TERM "$pid"
  wait "$pid"
  rc=$?
  cat interrupted.out
  [ "$rc" -eq 143 ] || fail "after SIGTERM ember-run exited with $rc, expected 143"
  grep -q '\[rank 0\] received SIGTERM: wrote checkpoints/last.ckpt' interrupted.out || fail "rank 0 did not checkpoint"
  grep -qE '"stop_reason": "signal"' run/summary.json || fail "summary.json does not say stop_reason signal"
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" output.run_dir=run checkpoint.resume=auto >resumed.out 2>&1 ||
    fail "the resumed DDP run exited with $?"
  cat resumed.out
  grep -q '\[rank 0\] ember-train: resumed from' resumed.out || fail "the second run did not resume"
  grep -qE '"world_size": 2' run/summary.json || fail "summary.json does not say world_size 2"
  ! grep -qE '^\[rank 1\] (epoch|ember-train)' straight.out resumed.out || fail "rank 1 printed run lines"
  [ "$(ls -A | grep -cv '\.out$\|c\.json')" -eq 2 ] || fail "directories other than straight/ and run/: $(ls -A)"
  same_metrics straight run "1 2 3 "
  ;;
nonfinite)
  write_tiny_config c.json
  expect 1 'the training loss became NaN or inf at epoch 1, batch [1-6] of 6; training stops before this epoch' \
    "$prog" c.json optim.lr=1e9 output.run_dir=stop
  [ ! -s stop/metrics.jsonl ] || fail "a metrics line was written for the diverged epoch: $(cat stop/metrics.jsonl)"
  [ -z "$(ls stop/checkpoints 2>/dev/null)" ] || fail "a checkpoint was written for the diverged epoch"
  expect 0 'epoch 2/2  .*  [1-6] steps skipped: non-finite loss' "$prog" c.json optim.lr=1e9 train.on_nonfinite=skip \
    output.run_dir=skip
  grep -qE '"nonfinite_steps":[1-6][.]0' skip/metrics.jsonl || fail "metrics.jsonl: $(cat skip/metrics.jsonl)"
  ;;
ddp_nonfinite)
  write_tiny_config c.json
  out=$(timeout -k 5 120 "$ember_run" --nproc-per-node 2 "$prog" c.json parallel.mode=ddp optim.lr=1e9 \
    output.run_dir=stop 2>&1)
  rc=$?
  printf '%s\n' "$out" | tail -n 8
  [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "ember-run exited with $rc, expected a failure (124: a hang)"
  grep -qE 'the training loss became NaN or inf at epoch 1(, batch [1-6] of [0-9]+ on rank [01]| on another rank)' \
    <<<"$out" || fail "no error naming the epoch"
  [ ! -s stop/metrics.jsonl ] && [ -z "$(ls stop/checkpoints 2>/dev/null)" ] || fail "the diverged epoch was written"
  out=$(timeout -k 5 120 "$ember_run" --nproc-per-node 2 "$prog" c.json parallel.mode=ddp optim.lr=1e9 \
    train.on_nonfinite=skip output.run_dir=skip 2>&1)
  rc=$?
  printf '%s\n' "$out" | tail -n 4
  [ "$rc" -eq 0 ] || fail "skip under DDP exited with $rc (124: a hang)"
  grep -qE '"nonfinite_steps":[1-9]' skip/metrics.jsonl || fail "metrics.jsonl: $(cat skip/metrics.jsonl)"
  ;;
ddp_restart)
  write_tiny_config c.json
  ddp=(parallel.mode=ddp epochs=3 data.limit_train=192 checkpoint.resume=auto)
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" output.run_dir=straight >straight.out 2>&1 ||
    fail "the uninterrupted DDP run exited with $?"
  # The same job under --max-restarts 1; rank 1 is SIGKILLed once epoch 1 is in metrics.jsonl.
  timeout -k 5 240 "$ember_run" --max-restarts 1 --nproc-per-node 2 "$prog" c.json "${ddp[@]}" \
    output.run_dir=restarted >restarted.out 2>&1 &
  job=$!
  killed=
  for _ in $(seq 1 2400); do
    if [ -s restarted/metrics.jsonl ]; then
      for p in $(pgrep -f 'output.run_dir=restarted'); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && kill -KILL "$p" && killed=$p
      done
      [ -n "$killed" ] && break
    fi
    kill -0 "$job" 2>/dev/null || break
    sleep 0.05
  done
  wait "$job"
  rc=$?
  cat restarted.out
  [ -n "$killed" ] || fail "rank 1 was not found to kill after epoch 1"
  [ "$rc" -eq 0 ] || fail "ember-run --max-restarts 1 exited with $rc (124: a hang)"
  grep -q "rank 1 (pid $killed) was killed by SIGKILL" restarted.out || fail "ember-run did not report the kill"
  grep -q 'ember-run: restarting every rank: restart 1 of 1' restarted.out || fail "no restart line"
  grep -q '\[rank 0\] ember-train: restart 1 of this job (EMBER_RESTART_COUNT)' restarted.out ||
    fail "ember-train did not say it is a restart"
  grep -q '\[rank 0\] ember-train: resumed from' restarted.out || fail "the restart did not resume"
  grep -q '"restarts": 1' restarted/summary.json || fail "summary.json: $(cat restarted/summary.json)"
  same_metrics straight restarted "1 2 3 "
  ;;
ddp_global_batch)
  write_tiny_config c.json
  scale=(data.global_batch_size=32 optim.lr_scaling=linear optim.reference_batch_size=16)
  out=$(timeout -k 5 120 "$ember_run" --nproc-per-node 2 "$prog" c.json parallel.mode=ddp epochs=1 "${scale[@]}" \
    parallel.sync_batchnorm=true output.run_dir=run 2>&1)
  rc=$?
  printf '%s\n' "$out" | head -n 12
  [ "$rc" -eq 0 ] || fail "ember-run exited with $rc (124: a hang)"
  grep -q 'ember-train: batch 16 per rank x 2 ranks = 32' <<<"$out" || fail "no per-rank batch of 16"
  grep -q 'ember-train: lr 0.02 x 32/16 (linear) = 0.04' <<<"$out" || fail "no lr scaling line"
  grep -qE "ember-train: SyncBatchNorm: [1-9][0-9]* BatchNorm2d layers? normalize with the statistics of all 2 ranks' batches" \
    <<<"$out" || fail "no SyncBatchNorm line"
  python3 - run <<'PY' || fail "config.json or summary.json does not hold the resolved numbers"
import json, sys
run = sys.argv[1]
c = json.load(open(run + "/config.json"))
s = json.load(open(run + "/summary.json"))
m = [json.loads(l) for l in open(run + "/metrics.jsonl")]
want = {"processes": 2, "batch_size_per_process": 16, "accumulation_steps": 1, "global_batch_size": 32, "lr": 0.04}
assert c["resolved"] == want, c["resolved"]
assert c["data"]["global_batch_size"] == 32 and c["data"]["batch_size"] == 16 and c["optim"]["lr"] == 0.02, c
assert s["global_batch_size"] == 32 and s["lr"] == 0.04, s
assert abs(m[0]["lr"] - 0.04) < 1e-12, m[0]  # cosine: epoch 1 starts at the scaled rate
PY
  # The run's config.json runs again (the resolved object is read and ignored).
  expect 0 'lr 0.02 x 32/16 \(linear\) = 0.04' "$prog" run/config.json output.run_dir=again
  grep -q 'parallel.sync_batchnorm has no effect without parallel.mode ddp' again/log.txt ||
    fail "the re-run on one process does not say SyncBatchNorm has no effect"
  grep -q '"global_batch_size": 32' again/summary.json || fail "the re-run on one process: $(cat again/summary.json)"
  grep -q '"batch_size_per_process": 32' again/config.json || fail "one process did not train in batches of 32"
  # 33 images do not split over 2 ranks: refused before any work, naming the numbers.
  expect 2 'data.global_batch_size 33 does not divide into 2 processes x train.accumulation_steps 1 = 2 batches of equal size: choose a multiple of 2 \(32 or 34\)' \
    "$ember_run" --nproc-per-node 2 "$prog" c.json parallel.mode=ddp data.global_batch_size=33 output.run_dir=bad
  [ ! -e bad ] || fail "the refused run wrote bad/"
  ;;
profile)
  # profile.enabled: batches 3-5 (wait 1, warmup 1, active 3) of ember's own spans, as a trace
  # Perfetto reads and a table.
  write_tiny_config c.json
  expect 0 'ember-train: profile: [0-9]+ spans in profile/trace.json' "$prog" c.json epochs=1 profile.enabled=true \
    output.run_dir=run
  python3 - run/profile/trace.json <<'PY' || fail "profile/trace.json: not the spans expected"
import json, sys
events = json.load(open(sys.argv[1]))["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
names = {e["name"] for e in spans}
for want in ("conv2d", "Conv2dBackward", "batch_norm", "optimizer step", "step 2", "step 3", "step 4"):
    assert want in names, (want, sorted(names))
assert not {"step 0", "step 1", "step 5"} & names, sorted(names)
convs = [e for e in spans if e["name"] == "conv2d"]
assert len(convs) % 3 == 0 and convs, len(convs)  # the same convolutions in each of 3 steps
assert any(e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"] == "main" for e in events)
PY
  grep -qE '^\| conv2d \| op \| [0-9]+ \|' run/profile/ops.md || fail "profile/ops.md: $(cat run/profile/ops.md)"
  grep -qE '^## Verdict' run/profile/ops.md || fail "profile/ops.md has no verdict: $(cat run/profile/ops.md)"
  ;;
profile_ddp)
  # Batches of 8: 6 per rank in the epoch, so batches 3-5 are kept on both ranks.
  write_tiny_config c.json
  out=$(timeout -k 5 180 "$ember_run" --nproc-per-node 2 "$prog" c.json parallel.mode=ddp epochs=1 data.batch_size=8 \
    profile.enabled=true output.run_dir=run 2>&1)
  rc=$?
  printf '%s\n' "$out" | head -n 20
  [ "$rc" -eq 0 ] || fail "ember-run exited with $rc (124: a hang)"
  grep -qE "ember-train: profile: [0-9]+ spans of 2 ranks in profile/trace.json \(clocks aligned to rank 0's within [0-9]+ us" \
    <<<"$out" || fail "no line saying the trace holds both ranks"
  [ "$(find run -name 'trace*.json' | wc -l)" -eq 1 ] || fail "not one trace file: $(find run -name 'trace*.json')"
  python3 - run/profile/trace.json <<'PY' || fail "profile/trace.json: not one trace of both ranks"
import json, sys
doc = json.load(open(sys.argv[1]))
events = doc["traceEvents"]
spans = [e for e in events if e["ph"] == "X"]
assert {e["pid"] for e in spans} == {0, 1}, {e["pid"] for e in spans}
rows = {e["pid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
assert rows == {0: "rank 0", 1: "rank 1"}, rows
for pid in (0, 1):
    names = {e["name"] for e in spans if e["pid"] == pid}
    for want in ("conv2d", "Conv2dBackward", "optimizer step", "step 2", "step 4"):
        assert want in names, (pid, want, sorted(names))
    assert any(n.startswith("all_reduce #") for n in names), (pid, sorted(names))
offsets = doc["otherData"]["clock_offsets"]
assert [o["rank"] for o in offsets] == [0, 1], offsets
assert offsets[1]["round_trips"] > 0 and abs(offsets[1]["offset_us"]) <= offsets[1]["residual_us"], offsets
PY
  grep -qE '^\| conv2d \| op \| [0-9]+ \|' run/profile/ops.md || fail "profile/ops.md: $(cat run/profile/ops.md)"
  grep -qE '^## Verdict' run/profile/ops.md || fail "profile/ops.md has no verdict: $(cat run/profile/ops.md)"
  grep -qE '^\| 1 \| 3 \|' run/profile/ops.md || fail "profile/ops.md's verdict has no row for rank 1: $(cat run/profile/ops.md)"
  ;;
ddp_zero)
  # ZeRO-1 steps as the plain optimizer does: the same numbers, bit for bit; its checkpoints hold the
  # whole optimizer state, so a ZeRO run resumed from epoch 1's ends like the run that never stopped.
  write_tiny_config c.json
  ddp=(parallel.mode=ddp epochs=2 checkpoint.keep_last=0)
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" output.run_dir=plain >plain.out 2>&1 ||
    fail "the plain DDP run exited with $?: $(cat plain.out)"
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" parallel.zero=1 output.run_dir=zero >zero.out 2>&1 ||
    fail "the ZeRO run exited with $?: $(cat zero.out)"
  cat zero.out
  grep -qE '\[rank 0\] ember-train: ZeRO-1: ZeroRedundancyOptimizer\(SGD\) splits the optimizer state over 2 ranks; rank 0 steps [0-9]+ of [0-9]+ parameter tensors' \
    zero.out || fail "no ZeRO-1 line"
  same_metrics plain zero "1 2 "
  "$ember_run" --nproc-per-node 2 "$prog" c.json "${ddp[@]}" parallel.zero=1 output.run_dir=resumed \
    checkpoint.resume=zero/checkpoints/epoch_1.ckpt >resumed.out 2>&1 || fail "the resumed ZeRO run exited with $?"
  grep -q '\[rank 0\] ember-train: resumed from' resumed.out || fail "the ZeRO run did not resume: $(cat resumed.out)"
  same_metrics plain resumed "1 2 "
  ;;
dp)
  write_tiny_config c.json
  expect 0 'batch 16 split over cpu, cpu \(DataParallel\)' "$prog" c.json parallel.mode=dp parallel.devices=cpu,cpu \
    output.run_dir=run
  grep -qE '"world_size": 2' run/summary.json || fail "summary.json does not say world_size 2"
  expect 2 'parallel.devices: expected a list of devices' "$prog" c.json parallel.mode=dp parallel.devices=cpu,tpu
  ;;
ddp_accuracy)
  data=/usr/share/datasets/fashion-mnist
  [ -e "$data/t10k-labels-idx1-ubyte" ] || [ -e "$data/t10k-labels-idx1-ubyte.gz" ] ||
    skip "no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"
  slice=(device=cpu epochs=2 data.limit_train=4000 data.limit_test=1000 early_stop.target_accuracy=null)
  cfg=$(dirname "$0")/../../configs/mnist_cnn.json
  # One global batch for both: 64 images per step, 32 per rank under DDP.
  "$prog" "$cfg" "${slice[@]}" data.global_batch_size=64 output.run_dir=single >single.out 2>&1 ||
    fail "the single-process run exited with $?"
  "$ember_run" --nproc-per-node 2 "$prog" "$cfg" "${slice[@]}" data.global_batch_size=64 parallel.mode=ddp \
    output.run_dir=ddp >ddp.out 2>&1 || fail "the DDP run exited with $?"
  cat single.out ddp.out
  grep -q '\[rank 0\] ember-train: batch 32 per rank x 2 ranks = 64' ddp.out || fail "no global batch line"
  ! grep -qE '^\[rank 1\] epoch' ddp.out || fail "rank 1 printed epoch lines"
  acc() { tail -n 1 "$1" | sed -E 's/.*"test_acc":([^,]*),.*/\1/'; }
  a=$(acc single/metrics.jsonl)
  b=$(acc ddp/metrics.jsonl)
  echo "test accuracy after 2 epochs: one process $a, DDP on 2 processes $b"
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
    fail "DDP test accuracy $b is not within 0.01 of the single process's $a"
  ;;
amp_accuracy)
  data=/usr/share/datasets/fashion-mnist
  [ -e "$data/t10k-labels-idx1-ubyte" ] || [ -e "$data/t10k-labels-idx1-ubyte.gz" ] ||
    skip "no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist)"
  slice=(device=cpu epochs=2 data.limit_train=4000 data.limit_test=1000 early_stop.target_accuracy=null)
  cfg=$(dirname "$0")/../../configs/mnist_cnn.json
  for p in fp32 bf16 fp16; do
    "$prog" "$cfg" "${slice[@]}" precision=$p output.run_dir=$p >$p.out 2>&1 || { cat $p.out; fail "precision=$p exited with $?"; }
    cat $p.out
  done
  grep -q 'mixed precision fp16 (autocast; parameters in f32; loss scale 65536)' fp16.out || fail "no fp16 line"
  grep -qE 'scale [0-9]+, [0-9]+ skipped' fp16.out || fail "fp16 epoch lines lack the loss scale"
  grep -qE '"loss_scale":[1-9]' fp16/metrics.jsonl || fail "fp16 metrics lack loss_scale"
  grep -qE '"loss_scale":0' bf16/metrics.jsonl || fail "bf16 metrics should have no loss scale"
  acc() { tail -n 1 "$1" | sed -E 's/.*"test_acc":([^,]*),.*/\1/'; }
  a=$(acc fp32/metrics.jsonl)
  for p in bf16 fp16; do
    b=$(acc $p/metrics.jsonl)
    echo "test accuracy after 2 epochs: fp32 $a, $p $b"
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
      fail "$p test accuracy $b is not within 0.01 of fp32's $a"
  done
  ;;
*)
  fail "unknown case '$case_name'"
  ;;
esac
echo "PASS: $case_name"
