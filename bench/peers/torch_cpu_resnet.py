#!/usr/bin/env python3
"""PyTorch peer for bench_cpu_resnet: one ResNet-18 (CIFAR) f32 training step on the CPU (forward,
cross-entropy, backward, SGD with momentum), row-major and channels-last, the same network as
ember's models::resnet18 (bench/peers/torch_gpu.py's).

  torch_cpu_resnet.py --batch N --steps S --warmup W --threads T

Prints `peer step_ms_<contiguous|channels_last> <median ms>` lines (bench_util.h's run_peer_script
parses them). Exits 77 without PyTorch.
"""
import argparse
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_cpu_resnet.py: SKIPPED: no PyTorch here")
    sys.exit(77)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_gpu  # noqa: E402  (the same ResNet-18 as the GPU peer's)


def batch_norms(a):
    # ResNet-18's batch norms (each stage's activation), training forward and backward, min of reps.
    for name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
        for c, hw in ((64, 32), (128, 16), (256, 8), (512, 4)):
            x = torch.randn(a.batch, c, hw, hw).contiguous(memory_format=fmt)
            g = torch.randn(a.batch, c, hw, hw).contiguous(memory_format=fmt)
            w, b, rm, rv = torch.ones(c), torch.zeros(c), torch.zeros(c), torch.ones(c)
            res = torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5)

            def best(fn):
                ms = float("inf")
                for r in range(a.reps + 1):
                    t0 = time.perf_counter()
                    fn()
                    if r > 0:
                        ms = min(ms, 1000 * (time.perf_counter() - t0))
                return ms

            fwd = best(lambda: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, True, 0.1, 1e-5))
            bwd = best(lambda: torch.ops.aten.native_batch_norm_backward(g, x, w, rm, rv, res[1], res[2], True, 1e-5,
                                                                         [True, True, True]))
            torch_gpu.emit(f"bn_{name}_{c}_fwd", fwd, "")
            torch_gpu.emit(f"bn_{name}_{c}_bwd", bwd, "")


def main():
    ap = argparse.ArgumentParser()
    for k in ("--batch", "--steps", "--warmup", "--threads"):
        ap.add_argument(k, type=int, required=True)
    ap.add_argument("--bn", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    if a.bn:
        batch_norms(a)
        return
    for name, fmt in (("contiguous", torch.contiguous_format), ("channels_last", torch.channels_last)):
        torch.manual_seed(3)
        model = torch_gpu.resnet18().to(memory_format=fmt)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
        x = torch.randn(a.batch, 3, 32, 32).contiguous(memory_format=fmt)
        y = torch.arange(a.batch) % 10
        times = []
        for i in range(a.warmup + a.steps):
            t0 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            if i >= a.warmup:
                times.append(1000 * (time.perf_counter() - t0))
        ms = statistics.median(times)
        torch_gpu.emit(f"step_ms_{name}", ms, f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}) "
                       f"resnet18 batch {a.batch}, {name}: "
                       f"{ms:.1f} ms per step (median of {a.steps}; {min(times):.1f}-{max(times):.1f})")


if __name__ == "__main__":
    main()
