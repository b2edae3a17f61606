#!/usr/bin/env python3
"""Reads ember's TensorBoard event files with the tensorboard package's own readers (PyPI
`tensorboard`), for tests/tools/tensorboard_peer.sh.

  tensorboard_reader.py check RUN_DIR STEPS_PER_EPOCH [--hparam KEY=VALUE ...] [--only TAG]
                         [--tolerance T] [--status success|failure|none]
      Every event file in RUN_DIR, read by tensorboard's EventFileLoader (the raw events) and
      EventAccumulator (as TensorBoard's scalar dashboard reads them, after its data-compat
      migration): the first event is file_version "brain.Event:2"; every scalar tag "<group>/<key>"
      holds, per epoch, exactly the value of <key> in RUN_DIR/metrics.jsonl rounded to float32
      (TensorBoard's scalars are DT_FLOAT tensors, as tf.summary.scalar writes them), at step epoch x STEPS_PER_EPOCH; every number of metrics.jsonl that ember
      writes a tag for has one; the HParams session-start summary parses with the hparams plugin's
      own parser and holds each --hparam; --status: the last session_end_info (parsed by the same
      plugin) says so, or there is none. --only TAG checks that tag alone (metrics.jsonl made from
      an example's printed lines: --tolerance T, the printed values' rounding). Prints one line per tag and exits 0, or 1 with the
      mismatch.
  tensorboard_reader.py truncated FILE WANT_EVENTS
      FILE (an event file cut inside its last record) reads through EventFileLoader without an
      error and yields exactly WANT_EVENTS events.
  tensorboard_reader.py count FILE
      Prints the number of events EventFileLoader reads from FILE.
Exit 77 when the tensorboard package cannot be imported (the caller reports the test Skipped).
"""
import glob
import json
import math
import os
import sys

try:
    from tensorboard.backend.event_processing import event_file_loader
    from tensorboard.backend.event_processing import plugin_event_accumulator
    from tensorboard.plugins.hparams import api_pb2
    from tensorboard.plugins.hparams import metadata as hparams_metadata
    from tensorboard.util import tensor_util
    import tensorboard
    import numpy
except Exception as e:  # ImportError, or a broken install
    print("SKIPPED: cannot import tensorboard in %s: %s" % (sys.executable, e))
    sys.exit(77)

# The metrics.jsonl keys ember writes a tag for (train/tensorboard.h, tensorboard_scalars): always,
# and the ones that are present only in some runs.
ALWAYS = ["train_loss", "test_loss", "test_acc", "epoch_seconds", "images_per_second", "lr", "eval_seconds",
          "data_wait_seconds", "forward_seconds", "backward_seconds", "optimizer_seconds", "nonfinite_steps",
          "cpu_seconds", "loader_cpu_seconds", "pool_wait_seconds"]


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def events_of(path):
    return list(event_file_loader.EventFileLoader(path).Load())


def check(run_dir, steps_per_epoch, hparams, only=None, tolerance=0.0, status=None):
    files = sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*")))
    if not files:
        fail("no events.out.tfevents.* in " + run_dir)
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    if not lines:
        fail("metrics.jsonl is empty")
    print("tensorboard %s reads %s" % (tensorboard.__version__, ", ".join(os.path.basename(f) for f in files)))

    # The raw events: file_version first, the hparams summary parsed by the plugin's own parser.
    session = None
    end = None
    for path in files:
        events = events_of(path)
        if not events or events[0].file_version != "brain.Event:2":
            fail("%s: the first event is not file_version brain.Event:2" % path)
        for e in events:
            for v in e.summary.value:
                if v.metadata.plugin_data.plugin_name != hparams_metadata.PLUGIN_NAME:
                    continue
                if v.tag == hparams_metadata.SESSION_START_INFO_TAG:
                    session = hparams_metadata.parse_session_start_info_plugin_data(v.metadata.plugin_data.content)
                elif v.tag == hparams_metadata.SESSION_END_INFO_TAG:
                    end = hparams_metadata.parse_session_end_info_plugin_data(v.metadata.plugin_data.content)
                else:
                    fail("hparams summary under tag %r" % v.tag)
    if session is None:
        fail("no HParams session_start_info summary")
    for kv in hparams:
        key, want = kv.split("=", 1)
        if key not in session.hparams:
            fail("hparam %s missing; have %s" % (key, sorted(session.hparams)))
        value = session.hparams[key]
        kind = value.WhichOneof("kind")
        got = {"number_value": lambda: repr(value.number_value), "string_value": lambda: value.string_value,
               "bool_value": lambda: "true" if value.bool_value else "false"}[kind]()
        if got != want and not (kind == "number_value" and float(want) == value.number_value):
            fail("hparam %s = %s, expected %s" % (key, got, want))
    if status is not None:
        got = "none" if end is None else api_pb2.Status.Name(end.status)
        want = "none" if status == "none" else "STATUS_" + status.upper()
        if got != want:
            fail("session_end_info status %s, expected %s" % (got, want))
        print("session end: %s" % got)
    print("hparams: %d values, e.g. %s" % (len(session.hparams), ", ".join(
        "%s=%s" % (k, session.hparams[k].WhichOneof("kind")) for k in sorted(session.hparams)[:4])))

    # As TensorBoard's dashboards see them: the accumulator over the run directory (all its files).
    acc = plugin_event_accumulator.EventAccumulator(run_dir, size_guidance={plugin_event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()["tensors"]
    scalar_tags = [t for t in tags if acc.SummaryMetadata(t).plugin_data.plugin_name == "scalars"]
    if only is not None:
        if only not in scalar_tags:
            fail("no tag %s; tags: %s" % (only, scalar_tags))
        scalar_tags = [only]
    if not scalar_tags:
        fail("no scalar tags; tags: %s" % tags)
    keys_seen = set()
    for tag in sorted(scalar_tags):
        key = tag.split("/", 1)[1]
        keys_seen.add(key)
        events = acc.Tensors(tag)
        if len(events) != len(lines):
            fail("%s: %d values, metrics.jsonl has %d epochs" % (tag, len(events), len(lines)))
        for ev, line in zip(events, lines):
            if key not in line:
                fail("%s: metrics.jsonl epoch %d has no %s" % (tag, line["epoch"], key))
            got = tensor_util.make_ndarray(ev.tensor_proto).item()
            want = line[key]
            same = (want is None and math.isnan(got)) or (want is not None and got == float(numpy.float32(want)))
            if tolerance > 0 and want is not None:
                same = abs(got - want) <= tolerance
            if not same:
                fail("%s at epoch %d: TensorBoard reads %r, metrics.jsonl has %r" % (tag, line["epoch"], got, want))
            if ev.step != line["epoch"] * steps_per_epoch:
                fail("%s at epoch %d: step %d, expected %d" % (tag, line["epoch"], ev.step,
                                                                 line["epoch"] * steps_per_epoch))
        print("%-34s %s" % (tag, " ".join("%d:%r" % (e.step, tensor_util.make_ndarray(e.tensor_proto).item())
                                             for e in events)))
    missing = [k for k in ALWAYS if k not in keys_seen and only is None]
    if missing:
        fail("metrics.jsonl keys without a tag: %s" % missing)
    print("OK: %d scalar tags x %d epochs equal metrics.jsonl" % (len(scalar_tags), len(lines)))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        args, hparams, only, tolerance, status = sys.argv[4:], [], None, 0.0, None
        while args:
            flag, value, args = args[0], args[1], args[2:]
            if flag == "--hparam":
                hparams.append(value)
            elif flag == "--only":
                only = value
            elif flag == "--tolerance":
                tolerance = float(value)
            elif flag == "--status":
                status = value
            else:
                fail("unknown flag " + flag)
        check(sys.argv[2], int(sys.argv[3]), hparams, only, tolerance, status)
    elif len(sys.argv) == 4 and sys.argv[1] == "truncated":
        try:
            n = len(events_of(sys.argv[2]))
        except Exception as e:
            fail("reading the cut file raised %s: %s" % (type(e).__name__, e))
        if n != int(sys.argv[3]):
            fail("the cut file yields %d events, expected %s" % (n, sys.argv[3]))
        print("OK: the cut file reads %d events, up to its last whole record" % n)
    elif len(sys.argv) == 3 and sys.argv[1] == "count":
        print(len(events_of(sys.argv[2])))
    else:
        print(__doc__)
        sys.exit(2)


if __name__ == "__main__":
    main()
