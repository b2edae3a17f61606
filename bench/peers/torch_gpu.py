#!/usr/bin/env python3
"""PyTorch peer for ember's GPU benchmarks: the same workloads, shapes, batches and step counts,
timed the same way (CUDA events around back-to-back steps after a warm-up, median of windows).

  torch_gpu.py train [--data DIR] [--quick]   mnist_cnn step (batch 64, 256), one resident epoch
                                              (batch 64), ResNet-18 (CIFAR) step at batch 128 in
                                              f32, under bf16 autocast, and under fp16 autocast
                                              with a GradScaler (PyTorch AMP)
  torch_gpu.py ops [--quick]                  add, sum, softmax, cross-entropy, Adam: GB/s beside a
                                              device-to-device copy

Every figure is printed as a line `peer <key> <value>` (ember's benchmarks run this script and
parse those lines to print both side by side) after a human-readable line. Arithmetic is full f32
on both sides: ember runs f32 convolutions and GEMMs without TF32, so TF32 is switched off here.
The bf16/fp16 ResNet-18 variants wrap forward + loss in torch.autocast("cuda", dtype); fp16 adds
torch.amp.GradScaler("cuda") (scale -> backward -> step -> update), as ember's amp::GradScaler.
cudnn.benchmark is on: ember searches cuDNN's algorithms on first use of a shape, as it does.
Exits 77 when no GPU is usable.
"""
import contextlib
import gzip
import os
import statistics
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_gpu.py: SKIPPED: no PyTorch here")
    sys.exit(77)


def emit(key, value, text):
    print(f"{text}")
    print(f"peer {key} {value:.6g}", flush=True)


def median_ms(fn, iters, reps, warmup=5):
    """Median milliseconds of one call of fn over `reps` windows of `iters` calls (CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(reps):
        start.record()
        for _ in range(iters):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / iters)
    return statistics.median(times)


def mnist_cnn():
    # models::mnist_cnn, layer for layer.
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + self.shortcut(x))


def resnet18(num_classes=10):
    # models::resnet18: the CIFAR variant (3x3 stem, no max-pool).
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for stage, width in enumerate([64, 128, 256, 512]):
        for b in range(2):
            layers.append(BasicBlock(cin, width, 2 if stage > 0 and b == 0 else 1))
            cin = width
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def resnet18_run(dev, precision, iters, reps, channels_last=False):
    """ResNet-18 (CIFAR) training step at batch 128: f32, or forward + loss under autocast in bf16,
    or in fp16 with a GradScaler. Emits ms, images/s and peak memory (peaks reset after the first
    step, the cache emptied before); everything it allocates is freed on return."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.manual_seed(3)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = resnet18().to(dev).to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    x = torch.randn(128, 3, 32, 32, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, 10, (128,), device=dev)
    dtype = {"f32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    scaler = None
    if precision == "fp16":  # torch.amp.GradScaler("cuda") since torch 2.3, torch.cuda.amp's before
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch.amp, "GradScaler") else torch.cuda.amp.GradScaler()

    def rstep():
        with torch.autocast("cuda", dtype=dtype) if dtype is not None else contextlib.nullcontext():
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    rstep()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ms = median_ms(rstep, iters, reps)
    sfx = ("" if precision == "f32" else "_" + precision) + ("_cl" if channels_last else "")
    what = {"f32": "", "bf16": ", bf16 autocast", "fp16": ", fp16 autocast + scaler"}[precision]
    what += ", channels-last" if channels_last else ""
    emit(f"resnet18_step_ms_b128{sfx}", ms,
         f"torch resnet18 step, batch 128{what}: {ms:.3f} ms, {128e3 / ms:.0f} images/s")
    emit(f"resnet18_images_per_s_b128{sfx}", 128e3 / ms, "")
    peak = torch.cuda.max_memory_allocated() / 2**20
    emit(f"resnet18_peak_allocated_mib{sfx}", peak, f"torch resnet18 peak allocated{what}: {peak:.0f} MiB")
    peak = torch.cuda.max_memory_reserved() / 2**20
    emit(f"resnet18_peak_reserved_mib{sfx}", peak, f"torch resnet18 peak reserved{what}: {peak:.0f} MiB")
    if scaler is not None and not channels_last:
        scale = scaler.get_scale()
        emit("resnet18_loss_scale_fp16", scale, f"torch resnet18 fp16: loss scale {scale:g} at the end")


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def train_images(data_dir, dev):
    """Fashion-MNIST's training set resident on the GPU, normalised as ember's loader does, or a
    random 60000-image set when the files are missing."""
    img = os.path.join(data_dir, "train-images-idx3-ubyte.gz")
    lab = os.path.join(data_dir, "train-labels-idx1-ubyte.gz")
    if os.path.exists(img) and os.path.exists(lab):
        x = read_idx(img).to(dev).float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
        y = read_idx(lab).to(dev).long()
        return x, y, "Fashion-MNIST"
    g = torch.Generator(device=dev).manual_seed(7)
    return (torch.randn(60000, 1, 28, 28, device=dev, generator=g),
            torch.randint(0, 10, (60000,), device=dev, generator=g), "synthetic")


def train(quick, data_dir):
    dev = torch.device("cuda")
    steps, reps = (5, 3) if quick else (50, 5)
    for batch in (64, 256):
        torch.manual_seed(3)
        model = mnist_cnn().to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(batch, 1, 28, 28, device=dev)
        y = torch.randint(0, 10, (batch,), device=dev)

        def step():
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

        ms = median_ms(step, steps, reps)
        emit(f"mnist_step_ms_b{batch}", ms, f"torch mnist_cnn step, batch {batch}: {ms:.3f} ms")

    # One epoch with the data resident: shuffled index batches, as ember's resident loader.
    xs, ys, what = train_images(data_dir, dev)
    n = 64 * 20 if quick else xs.shape[0]
    xs, ys = xs[:n], ys[:n]
    torch.manual_seed(3)
    model = mnist_cnn().to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def epoch():
        perm = torch.randperm(n, device=dev)
        for i in range(0, n, 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(model(xs[idx]), ys[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        return loss

    epoch()  # warm-up epoch, as ember's benchmark does
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    loss = epoch()
    stop.record()
    loss.item()
    s = start.elapsed_time(stop) / 1e3
    emit("mnist_epoch_s_b64", s, f"torch mnist_cnn one epoch ({n} {what} images, batch 64): {s:.3f} s")

    # Free the epoch's model and the resident images before ResNet-18, so its peaks are its own.
    del step, epoch, model, opt, loss, x, y, xs, ys

    # ResNet-18 (CIFAR), batch 128, in each precision.
    for channels_last in (False, True):
        for precision in ("f32", "bf16", "fp16"):
            resnet18_run(dev, precision, 5 if quick else 20, reps, channels_last)


def ops(quick):
    dev = torch.device("cuda")
    n = 1 << 24 if quick else 1 << 26
    iters, reps = 20, (5 if quick else 25)
    torch.manual_seed(7)
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    dst = torch.empty(n, device=dev)
    rows = a.view(n // 4096, 4096)
    target = torch.randint(0, 4096, (n // 4096,), device=dev)

    def gbs(key, nbytes, fn):
        ms = median_ms(fn, iters, reps)
        emit(f"{key}_gbs", nbytes / (ms * 1e-3) / 1e9, f"torch {key}: {ms * 1e3:.1f} us, {nbytes / ms / 1e6:.0f} GB/s")

    gbs("copy", 2 * 4 * n, lambda: dst.copy_(a))
    gbs("add", 3 * 4 * n, lambda: a + b)
    gbs("add_out", 3 * 4 * n, lambda: torch.add(a, b, out=dst))
    gbs("sum", 4 * n, lambda: a.sum())
    gbs("softmax", 2 * 4 * n, lambda: torch.softmax(rows, -1))
    gbs("cross_entropy", 4 * n, lambda: F.cross_entropy(rows, target))
    # Adam over one parameter of n elements: reads p, g, m, v; writes p, m, v.
    p = torch.randn(n, device=dev, requires_grad=True)
    p.grad = torch.randn(n, device=dev)
    for fused in (True, False):
        opt = torch.optim.Adam([p], lr=1e-3, fused=fused, foreach=None if fused else True)
        gbs("adam_fused" if fused else "adam_foreach", 7 * 4 * n, opt.step)


def main():
    args = sys.argv[1:]
    if not torch.cuda.is_available():
        print("torch_gpu.py: SKIPPED: no usable GPU")
        sys.exit(77)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    quick = "--quick" in args
    data_dir = args[args.index("--data") + 1] if "--data" in args else "/usr/share/datasets/fashion-mnist"
    print(f"torch_gpu.py: torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN "
          f"{torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    if "train" in args:
        train(quick, data_dir)
    if "ops" in args:
        ops(quick)


if __name__ == "__main__":
    main()
