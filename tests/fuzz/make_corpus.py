#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz harnesses: tests/fuzz/corpus/<name>/ (docs/fuzzing.md).

Each file is small (a few KB at most) and built here byte by byte from the format descriptions
(data/mnist.h, data/cifar.h, serialize/checkpoint.h, parallel/store_protocol.h), independently of
ember's readers; configs/ contributes real config files. A file named valid-* must load and one
named invalid-* must be refused (tests/fuzz/replay_main.cpp checks both); the rest are malformed
starting points for the fuzzers that only have to keep the contract.

    python3 tests/fuzz/make_corpus.py      # rewrites tests/fuzz/corpus/ (deterministic output)
"""
import gzip
import os
import shutil
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(name, filename, data):
    d = os.path.join(CORPUS, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, filename), "wb") as f:
        f.write(data)


def gz(data):
    return gzip.compress(data, compresslevel=9, mtime=0)


def pattern(n, mul=7, add=3):
    return bytes((i * mul + add) % 256 for i in range(n))


# ---- IDX (big-endian header: magic, one u32 per dim, then u8 elements) ----
def idx_images(n, rows, cols, pixels=None):
    pixels = pattern(n * rows * cols) if pixels is None else pixels
    return struct.pack(">IIII", 2051, n, rows, cols) + pixels


def idx_labels(labels):
    return struct.pack(">II", 2049, len(labels)) + bytes(labels)


def make_idx():
    write("idx", "valid-images-3x4x5.idx", idx_images(3, 4, 5))
    write("idx", "valid-images-1x28x28.idx.gz", gz(idx_images(1, 28, 28)))
    write("idx", "valid-labels-10.idx", idx_labels([3, 1, 4, 1, 5, 9, 2, 6, 5, 3]))
    write("idx", "valid-labels-4.idx.gz", gz(idx_labels([0, 1, 2, 9])))
    write("idx", "invalid-images-truncated.idx", idx_images(3, 4, 5)[:-7])
    write("idx", "invalid-images-trailing.idx", idx_images(2, 2, 2) + b"\x00\x01")
    write("idx", "invalid-images-zero-rows.idx", struct.pack(">IIII", 2051, 1, 0, 5))
    write("idx", "invalid-images-huge-header.idx", struct.pack(">IIII", 2051, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF))
    write("idx", "invalid-images-huge-header.idx.gz", gz(struct.pack(">IIII", 2051, 60000, 1000, 1000)))
    write("idx", "invalid-labels-huge-count.idx", struct.pack(">II", 2049, 0x7FFFFFFF) + b"\x01\x02")
    write("idx", "invalid-wrong-magic.idx", struct.pack(">II", 2050, 1) + b"\x00")
    write("idx", "invalid-empty.idx", b"")
    write("idx", "invalid-gzip-cut.idx.gz", gz(idx_labels(list(range(10)) * 10))[:-12])


# ---- CIFAR (records: label byte(s), then 3072 pixels) ----
def cifar_record(labels, seed):
    return bytes(labels) + pattern(3072, mul=seed * 2 + 1, add=seed)


def make_cifar():
    c10 = cifar_record([3], 1) + cifar_record([9], 2)
    write("cifar", "valid-cifar10-2-records.bin", c10)
    write("cifar", "valid-cifar100-1-record.bin", cifar_record([19, 99], 3))
    write("cifar", "valid-cifar10-2-records.bin.gz", gz(c10))
    write("cifar", "invalid-cifar10-label-10.bin", cifar_record([10], 4))
    write("cifar", "invalid-cifar100-fine-label-100.bin", cifar_record([5, 100], 5))
    write("cifar", "invalid-truncated-record.bin", cifar_record([1], 6)[:2000])
    write("cifar", "invalid-empty.bin", b"")


# ---- checkpoints (serialize/checkpoint.h, every integer little-endian) ----
DTYPES = {"f32": (1, 4), "f64": (2, 8), "f16": (3, 2), "bf16": (4, 2), "i32": (5, 4), "i64": (6, 8), "u8": (7, 1),
          "bool": (8, 1)}


def checkpoint(entries):
    """entries: {name: (dtype, shape, raw bytes)}; written as save_tensors writes (sorted names,
    payload offsets aligned to 64 bytes, zero padding)."""
    table, payload = b"", b""
    for name in sorted(entries):
        dtype, shape, raw = entries[name]
        code, size = DTYPES[dtype]
        numel = 1
        for s in shape:
            numel *= s
        assert len(raw) == numel * size, name
        offset = (len(payload) + 63) // 64 * 64
        payload += b"\x00" * (offset - len(payload)) + raw
        nb = name.encode()
        table += struct.pack("<I", len(nb)) + nb + struct.pack("<II", code, len(shape))
        table += b"".join(struct.pack("<Q", s) for s in shape)
        table += struct.pack("<QQI", offset, len(raw), zlib.crc32(raw))
    header = b"EMBERCKP" + struct.pack("<IIQQQI", 1, 0, len(entries), len(table), len(payload), zlib.crc32(table))
    header += struct.pack("<I", zlib.crc32(header))
    return header + table + payload + struct.pack("<I", zlib.crc32(payload))


def i64(*values):
    return struct.pack("<%dq" % len(values), *values)


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def scalars(epoch=0, step=0, position=0):
    return {"epoch": ("i64", [], i64(epoch)), "global_step": ("i64", [], i64(step)),
            "sampler_position": ("i64", [], i64(position))}


def make_checkpoint():
    full = scalars(3, 180, 64)
    full.update({
        "model/fc.weight": ("f32", [3, 4], f32(*[0.25 * i - 1 for i in range(12)])),
        "model/fc.bias": ("f32", [3], f32(0.5, -0.5, 0.0)),
        "model/bn.num_batches_tracked": ("i64", [], i64(180)),
        "optimizer/state.0.momentum_buffer": ("f32", [3, 4], f32(*[0.01 * i for i in range(12)])),
        "optimizer/param_groups.0.lr": ("f64", [], struct.pack("<d", 0.1)),
        "scheduler/last_epoch": ("i64", [], i64(3)),
        "sampler/seed": ("i64", [], i64(7)),
        "grad_scaler/scale": ("f32", [], f32(65536.0)),
        "model/mask": ("bool", [4], bytes([1, 0, 1, 1])),
        "model/half": ("f16", [2], b"\x00\x3c\x00\xc0"),
        "model/brain": ("bf16", [2], b"\x80\x3f\x00\x40"),
        "model/count": ("i32", [2, 1], struct.pack("<ii", 5, -6)),
        "model/empty": ("f32", [0, 3], b""),
        "rng/default": ("i64", [2], i64(1, 4096)),
        "rng/loader": ("i64", [2], i64(7, 12)),
        "meta/model": ("u8", [9], b"mnist_cnn"),
        "meta/git": ("u8", [0], b""),
    })
    good = checkpoint(full)
    write("checkpoint", "valid-full.ckpt", good)
    write("checkpoint", "valid-scalars-only.ckpt", checkpoint(scalars()))
    write("checkpoint", "invalid-no-epoch.ckpt", checkpoint({"model/w": ("f32", [1], f32(1.0))}))
    write("checkpoint", "invalid-unknown-section.ckpt", checkpoint(dict(scalars(), **{"weights/w": ("u8", [1], b"\x01")})))
    write("checkpoint", "invalid-rng-shape.ckpt", checkpoint(dict(scalars(), **{"rng/default": ("i64", [1], i64(1))})))
    flipped = bytearray(good)
    flipped[len(good) - 40] ^= 0x10  # a payload byte: the entry's CRC-32 catches it
    write("checkpoint", "invalid-flipped-payload-byte.ckpt", bytes(flipped))
    write("checkpoint", "invalid-truncated.ckpt", good[: len(good) // 2])
    write("checkpoint", "invalid-not-a-checkpoint.ckpt", b"PK\x03\x04 this is a zip file, not a checkpoint")


# ---- store requests (parallel/store_protocol.h: u32 length + body, little-endian) ----
SET, SET_NOREPLY, GET, ADD, COMPARE_SET, WAIT, CHECK, REMOVE = range(1, 9)


def s(text):
    b = text.encode()
    return struct.pack("<I", len(b)) + b


def q(v):
    return struct.pack("<q", v)


def keys(*ks):
    return q(len(ks)) + b"".join(s(k) for k in ks)


def msg(cmd, body=b""):
    b = bytes([cmd]) + body
    return struct.pack("<I", len(b)) + b


def make_store():
    rendezvous = b"".join([
        msg(SET, s("rank/0") + s("127.0.0.1:29500")),
        msg(GET, s("rank/1") + q(30000)),  # parked until the set below
        msg(SET_NOREPLY, s("rank/1") + s("127.0.0.1:29501")),
        msg(ADD, s("arrived") + q(1)),
        msg(ADD, s("arrived") + q(1)),
        msg(COMPARE_SET, s("leader") + s("") + s("0")),
        msg(COMPARE_SET, s("leader") + s("1") + s("2")),
        msg(WAIT, q(1000) + keys("barrier/init/0", "barrier/init/1")),
        msg(SET, s("barrier/init/0") + s("1")),
        msg(SET, s("barrier/init/1") + s("1")),
        msg(CHECK, keys("rank/0", "rank/1")),
        msg(REMOVE, s("leader")),
        msg(GET, s("never") + q(0)),  # timed out by the harness
        msg(WAIT, q(5) + keys("never/1", "never/2")),
    ])
    write("store", "valid-rendezvous.bin", rendezvous)
    write("store", "valid-add-to-text.bin", msg(SET, s("k") + s("abc")) + msg(ADD, s("k") + q(2)))
    write("store", "valid-unknown-command.bin", msg(42, b"xyz") + msg(CHECK, keys()))
    write("store", "valid-truncated-field.bin", msg(SET, s("key")[:-1]) + msg(GET, s("k")))
    write("store", "valid-oversized-length.bin", msg(CHECK, keys("a")) + struct.pack("<I", 0xFFFFFFF0) + b"\x01")
    write("store", "valid-partial-message.bin", msg(SET, s("a") + s("b")) + msg(SET, s("c") + s("d"))[:7])


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    make_idx()
    make_cifar()
    make_checkpoint()
    make_store()
    for cfg in ("mnist_cnn.json", "cifar10_resnet18.json", "cifar100_wide_resnet.json"):
        with open(os.path.join(ROOT, "configs", cfg), "rb") as f:
            write("config", "valid-" + cfg, f.read())
    write("config", "valid-overrides.json",
          b'{"name": "fuzz", "epochs": 2, "optim": {"name": "sgd", "lr": 0.1}}'
          b"\0optim.momentum=0.9\0optim.nesterov=true\0schedule.milestones=[1, 2]\0parallel.devices=cpu,cpu"
          b'\0description="quoted text"\0early_stop.target_accuracy=null')
    write("config", "valid-empty-object.json", b"{}")
    write("config", "invalid-typo.json", b'{"optim": {"lrr": 0.1}}')
    write("config", "invalid-type.json", b'{"data": {"batch_size": -3}, "epochs": "ten"}')
    write("config", "invalid-malformed.json", b'{"epochs": 3,\n "model": {"name": "mnist_cnn"\n')
    write("config", "invalid-cross-field.json", b'{"model": {"name": "resnet18"}}')
    write("config", "invalid-override.json", b'{}\0optim.lr=-1')
    write("config", "invalid-override-no-equals.json", b"{}\0optim.lr")
    write("config", "invalid-top-level-array.json", b"[1, 2, 3]")


if __name__ == "__main__":
    main()
