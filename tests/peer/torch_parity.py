#!/usr/bin/env python3
"""PyTorch's side of tests/peer/torch_parity.cpp: trains every run of DIR/manifest.txt from ember's
initial weights and batches and writes what it ended with, for ember to compare.

  torch_parity.py --device cpu|cuda --dir DIR
  torch_parity.py --device cpu|cuda --probe     exit 0 when this Python can run the peer there

Each manifest line is one run, key=value fields: tag, case, model (mnist_cnn, small_resnet,
layer_options), dtype (f64, f32), steps S, input N,C,H,W, channels_last (0/1), clip (max norm,
0: none), label_smoothing. For a run it reads DIR/TAG.in.bin (float64: the parameters in
parameters() order, then S + 1 input batches) and DIR/TAG.in.bin.shapes (ember's parameter names
and shapes, checked against this model's), and writes DIR/TAG.out.bin (float64): the S training
losses, the eval-mode loss on batch S, the final parameters, then the floating buffers
(running_mean, running_var) in named_buffers() order. Targets of batch s: (7 * i + 3 * s) % 10
for row i. Exits 77 without PyTorch.
"""
import argparse
import os
import sys

try:
    import numpy  # noqa: F401  (Tensor.numpy() writes the results)
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError as e:
    print(f"torch_parity.py: SKIPPED: {e}")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
import torch_gpu  # noqa: E402  (mnist_cnn and BasicBlock, written as ember's)


def small_resnet():
    """The same layers as torch_parity.cpp's small_resnet()."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        torch_gpu.BasicBlock(16, 16, 1), torch_gpu.BasicBlock(16, 32, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def layer_options():
    """The same layers as torch_parity.cpp's layer_options(); input 3x21x21."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 5, stride=2, padding=2), nn.BatchNorm2d(8), nn.ReLU(),
        nn.MaxPool2d(3, 2, 1, ceil_mode=True),
        nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2), nn.ReLU(),
        nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
        nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16),
        nn.AvgPool2d(2, 1, 1), nn.AdaptiveAvgPool2d(3), nn.Flatten(), nn.Linear(144, 10, bias=False))


MODELS = {"mnist_cnn": torch_gpu.mnist_cnn, "small_resnet": small_resnet, "layer_options": layer_options}


def optimizer_and_schedule(case, params, steps):
    """The optimizer and schedule of each case in torch_parity.cpp's cases()."""
    if case == "mnist_cnn_sgd_nesterov":
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    if case == "mnist_cnn_adam":
        opt = torch.optim.Adam(params, lr=1e-3, betas=(0.85, 0.995), eps=1e-7, weight_decay=1e-4)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    if case.startswith("small_resnet_adamw"):
        opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=5e-2)
        # ember's OneCycleLR cycles the learning rate only.
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps, cycle_momentum=False)
    if case == "small_resnet_sgd_multistep":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
        return opt, torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.3)
    if case.startswith("layer_options_sgd_warmup"):
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-4)
        # ember's LinearWarmup(2 steps from 0.1 x, then the cosine with its clock shifted by 2).
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=2)
        cos = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps - 2)
        return opt, torch.optim.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[2])
    raise SystemExit(f"torch_parity.py: unknown case {case}")


def run(r, dev, folder):
    """One manifest line r (a dict of its fields)."""
    case, steps = r["case"], int(r["steps"])
    dtype = {"f64": torch.float64, "f32": torch.float32}[r["dtype"]]
    ls, clip = float(r["label_smoothing"]), float(r["clip"])
    model = MODELS[r["model"]]().to(dtype)
    fmt = torch.channels_last if r["channels_last"] == "1" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if r["model"] == "mnist_cnn":
        model.eval()  # dropout off, as on ember's side

    in_file = os.path.join(folder, r["tag"] + ".in.bin")
    with open(in_file + ".shapes") as f:
        theirs = [line.split(" ", 1) for line in f.read().splitlines()]
    mine = list(model.named_parameters())
    if len(theirs) != len(mine):
        raise SystemExit(f"torch_parity.py: {case}: ember has {len(theirs)} parameters, this model {len(mine)}")
    for (tname, tshape), (name, p) in zip(theirs, mine):
        if tshape != str(list(p.shape)) or tname.rsplit(".", 1)[-1] != name.rsplit(".", 1)[-1]:
            raise SystemExit(f"torch_parity.py: {case}: ember's {tname} is {tshape}, this model's {name} is "
                             f"{list(p.shape)}")
    blob = torch.from_file(in_file, size=os.path.getsize(in_file) // 8, dtype=torch.float64)
    at = 0
    with torch.no_grad():
        for _, p in mine:
            n = p.numel()
            p.copy_(blob[at:at + n].view(p.shape))
            at += n
    shape = tuple(int(v) for v in r["input"].split(","))
    per = shape[0] * shape[1] * shape[2] * shape[3]
    if blob.numel() != at + (steps + 1) * per:
        raise SystemExit(f"torch_parity.py: {in_file}: {blob.numel()} values, expected {at + (steps + 1) * per}")
    model = model.to(dev)

    def batch(s):
        x = blob[at + s * per:at + (s + 1) * per].view(shape).to(dev, dtype).contiguous(memory_format=fmt)
        y = ((7 * torch.arange(shape[0]) + 3 * s) % 10).to(dev)
        return x, y

    opt, sched = optimizer_and_schedule(case, model.parameters(), steps)
    losses = []
    for s in range(steps):
        x, y = batch(s)
        loss = F.cross_entropy(model(x), y, label_smoothing=ls)
        opt.zero_grad()
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        x, y = batch(steps)
        losses.append(F.cross_entropy(model(x), y, label_smoothing=ls).item())

    out = [torch.tensor(losses, dtype=torch.float64)]
    out += [p.detach().cpu().to(torch.float64).contiguous().flatten() for p in model.parameters()]
    out += [b.cpu().to(torch.float64).flatten() for b in model.buffers() if b.is_floating_point()]
    with open(os.path.join(folder, r["tag"] + ".out.bin"), "wb") as f:
        f.write(torch.cat(out).numpy().tobytes())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", required=True, choices=["cpu", "cuda"])
    ap.add_argument("--dir")
    ap.add_argument("--probe", action="store_true")
    a = ap.parse_args()
    if a.probe:
        if a.device == "cuda" and not torch.cuda.is_available():
            print("torch_parity.py: SKIPPED: this PyTorch has no usable CUDA device")
            sys.exit(77)
        return
    if a.dir is None:
        ap.error("--dir is required")
    torch.set_num_threads(2)
    dev = torch.device(a.device)
    if dev.type == "cuda":  # ember computes f32 in f32 (no TF32) unless told otherwise
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    with open(os.path.join(a.dir, "manifest.txt")) as f:
        for line in f.read().splitlines():
            run(dict(field.split("=", 1) for field in line.split()), dev, a.dir)
    print(f"torch_parity.py: PyTorch {torch.__version__} on {dev}")


if __name__ == "__main__":
    main()
