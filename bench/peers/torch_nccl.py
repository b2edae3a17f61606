#!/usr/bin/env python3
"""PyTorch peer of ember's bench_nccl: the cost of one torch.distributed.all_reduce call with the
nccl backend at world size 1 on cuda:0, in place, sum, f32, at the same sizes and timed the same way
(CUDA events on the current stream around windows of back-to-back calls after a warm-up; median
window divided by its call count; "host" is the issuing loop's wall time per call, taken before the
closing event is awaited).

  torch_nccl.py [--quick]      4 B, 4 KiB, 1 MiB, 64 MiB (--quick: 4 B and 1 MiB, few windows)

Every figure is printed as a line `peer <key> <value>` (allreduce_us_<bytes>,
allreduce_host_us_<bytes>) after a human-readable line. The process group's store listens on
127.0.0.1 only, at a port the system picks. Exits 77 when PyTorch, its NCCL backend or a GPU is
missing; exits 1 when sum or avg changes the values (at world size 1 neither may).
"""
import socket
import statistics
import sys
import time

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("torch_nccl.py: SKIPPED: no PyTorch here")
    sys.exit(77)


def emit(key, value, text):
    print(text)
    print(f"peer {key} {value:.6g}", flush=True)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_group(dev):
    kwargs = dict(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        dist.init_process_group("nccl", device_id=dev, **kwargs)
    except TypeError:  # torch before 2.3 has no device_id
        dist.init_process_group("nccl", **kwargs)


def time_calls(fn, iters, reps, warmup=10):
    """Median microseconds per call of fn over `reps` windows of `iters` calls: (events, host)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    us, host_us = [], []
    for _ in range(reps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        host_us.append((time.perf_counter() - t0) * 1e6 / iters)
        stop.record()
        stop.synchronize()
        us.append(start.elapsed_time(stop) * 1e3 / iters)
    return statistics.median(us), statistics.median(host_us)


def main():
    quick = "--quick" in sys.argv[1:]
    if not torch.cuda.is_available():
        print("torch_nccl.py: SKIPPED: no usable GPU")
        sys.exit(77)
    if not dist.is_available() or not dist.is_nccl_available():
        print("torch_nccl.py: SKIPPED: this PyTorch has no NCCL backend")
        sys.exit(77)
    dev = torch.device("cuda:0")
    torch.cuda.set_device(dev)
    sizes = [4, 1 << 20] if quick else [4, 4 << 10, 1 << 20, 64 << 20]
    iters, reps = (20, 3) if quick else (200, 9)
    init_group(dev)
    print(f"torch_nccl.py: torch {torch.__version__}, NCCL {torch.cuda.nccl.version()}, "
          f"{torch.cuda.get_device_name()}, world size {dist.get_world_size()}")
    for nbytes in sizes:
        want = torch.arange(nbytes // 4, device=dev).remainder_(7).float()
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG):
            t = want.clone()
            dist.all_reduce(t, op=op)
            if not torch.equal(t, want):
                print(f"torch_nccl.py: FAILED: all_reduce {op} of {nbytes // 4} floats at world size 1 changed the "
                      "values")
                sys.exit(1)
        t = want.clone()
        us, host_us = time_calls(lambda: dist.all_reduce(t), iters, reps)
        emit(f"allreduce_us_{nbytes}", us, f"torch all_reduce, {nbytes} B: {us:.2f} us per call")
        emit(f"allreduce_host_us_{nbytes}", host_us, f"torch all_reduce, {nbytes} B: {host_us:.2f} us host per call")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
