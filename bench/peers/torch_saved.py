#!/usr/bin/env python3
"""PyTorch peer for bench_saved_memory: what one ResNet-18 (CIFAR) training step keeps alive for
its backward on the CPU, as the bytes of the unique storages its autograd graph saves
(torch.autograd.graph.saved_tensors_hooks), parameters and the input left out: ember's figure is
its caching allocator's growth over the forward, which counts the same tensors.

  torch_saved.py [--batch N]    variants f32, bf16 (torch.autocast("cpu", bfloat16)), each
                                contiguous and channels-last

Prints `peer saved_mib_<variant> <MiB>` lines (bench_util.h's run_peer_script parses them).
Exits 77 without PyTorch.
"""
import os
import sys

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_saved.py: SKIPPED: no PyTorch here")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpu  # noqa: E402  (the same ResNet-18 as the GPU peer's)


def saved_mib(batch, low, channels_last):
    torch.manual_seed(3)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = torch_gpu.resnet18().to(memory_format=fmt)
    x = torch.randn(batch, 3, 32, 32).contiguous(memory_format=fmt)
    y = torch.arange(batch) % 10
    left_out = {p.untyped_storage().data_ptr() for p in model.parameters()}
    left_out.add(x.untyped_storage().data_ptr())
    storages = {}

    def pack(t):
        s = t.untyped_storage()
        if s.data_ptr() not in left_out:
            storages[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=low):
            loss = F.cross_entropy(model(x), y)
    loss.backward()
    return sum(storages.values()) / 2**20


def main():
    batch = int(sys.argv[sys.argv.index("--batch") + 1]) if "--batch" in sys.argv else 32
    for low in (False, True):
        for cl in (False, True):
            key = ("bf16" if low else "f32") + ("_cl" if cl else "")
            mib = saved_mib(batch, low, cl)
            torch_gpu.emit(f"saved_mib_{key}", mib, f"torch resnet18 batch {batch}, {key}: saved {mib:.1f} MiB")


if __name__ == "__main__":
    main()
