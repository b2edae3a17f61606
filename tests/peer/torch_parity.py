#!/usr/bin/env python3
"""PyTorch's side of tests/peer/torch_parity.cpp: trains one case from ember's initial weights and
batches and writes what it ended with, for ember to compare.

  torch_parity.py --case NAME --model mnist_cnn|small_resnet --dtype f64|f32 --dir DIR --tag TAG
                  --steps S --batch B [--channels-last] [--clip MAX] [--label-smoothing X]

Reads DIR/TAG.in.bin (float64: the parameters in parameters() order, then S + 1 input batches)
and DIR/TAG.in.bin.shapes (ember's parameter names and shapes, checked against this model's).
Writes DIR/TAG.out.bin (float64): the S training losses, the eval-mode loss on batch S, the final
parameters, then the floating buffers (running_mean, running_var) in named_buffers() order.
Targets of batch s: (7 * i + 3 * s) % 10 for row i. Exits 77 without PyTorch.
"""
import argparse
import os
import sys

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    print("torch_parity.py: SKIPPED: no PyTorch here")
    sys.exit(77)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "peers"))
import torch_gpu  # noqa: E402  (mnist_cnn and BasicBlock, written as ember's)


def small_resnet():
    """The same layers as torch_parity.cpp's small_resnet()."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        torch_gpu.BasicBlock(16, 16, 1), torch_gpu.BasicBlock(16, 32, 2),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def optimizer_and_schedule(case, params, steps):
    """The optimizer and schedule of each case in torch_parity.cpp's cases()."""
    if case == "mnist_cnn_sgd_nesterov":
        opt = torch.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4, nesterov=True)
        return opt, torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps)
    if case == "mnist_cnn_adam":
        opt = torch.optim.Adam(params, lr=1e-3, weight_decay=1e-4)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    if case.startswith("small_resnet_adamw"):
        opt = torch.optim.AdamW(params, lr=2e-3, weight_decay=5e-2)
        # ember's OneCycleLR cycles the learning rate only.
        return opt, torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=5e-3, total_steps=steps, cycle_momentum=False)
    if case == "small_resnet_sgd_multistep":
        opt = torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3)
        return opt, torch.optim.lr_scheduler.MultiStepLR(opt, milestones=[2, 4], gamma=0.3)
    raise SystemExit(f"torch_parity.py: unknown case {case}")


def main():
    ap = argparse.ArgumentParser()
    for k in ("--case", "--model", "--dtype", "--dir", "--tag"):
        ap.add_argument(k, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--clip", type=float, default=0.0)
    ap.add_argument("--label-smoothing", type=float, default=0.0)
    a = ap.parse_args()
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)
    dtype = {"f64": torch.float64, "f32": torch.float32}[a.dtype]
    model = torch_gpu.mnist_cnn() if a.model == "mnist_cnn" else small_resnet()
    model = model.to(dtype)
    fmt = torch.channels_last if a.channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if a.model == "mnist_cnn":
        model.eval()  # dropout off, as on ember's side

    in_file = os.path.join(a.dir, a.tag + ".in.bin")
    with open(in_file + ".shapes") as f:
        theirs = [line.split(" ", 1) for line in f.read().splitlines()]
    mine = list(model.named_parameters())
    if len(theirs) != len(mine):
        raise SystemExit(f"torch_parity.py: {a.case}: ember has {len(theirs)} parameters, this model {len(mine)}")
    for (tname, tshape), (name, p) in zip(theirs, mine):
        if tshape != str(list(p.shape)):
            raise SystemExit(f"torch_parity.py: {a.case}: ember's {tname} is {tshape}, this model's {name} is "
                             f"{list(p.shape)}")
    blob = torch.from_file(in_file, size=os.path.getsize(in_file) // 8, dtype=torch.float64)
    at = 0
    with torch.no_grad():
        for _, p in mine:
            n = p.numel()
            p.copy_(blob[at:at + n].view(p.shape))
            at += n
    shape = (a.batch,) + tuple(mine[0][1].shape[1:2]) + ((28, 28) if a.model == "mnist_cnn" else (16, 16))
    per = a.batch * shape[1] * shape[2] * shape[3]
    if blob.numel() != at + (a.steps + 1) * per:
        raise SystemExit(f"torch_parity.py: {in_file}: {blob.numel()} values, expected {at + (a.steps + 1) * per}")

    def batch(s):
        x = blob[at + s * per:at + (s + 1) * per].view(shape).to(dtype).contiguous(memory_format=fmt)
        y = (7 * torch.arange(a.batch) + 3 * s) % 10
        return x, y

    opt, sched = optimizer_and_schedule(a.case, model.parameters(), a.steps)
    losses = []
    for s in range(a.steps):
        x, y = batch(s)
        loss = F.cross_entropy(model(x), y, label_smoothing=a.label_smoothing)
        opt.zero_grad()
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        x, y = batch(a.steps)
        losses.append(F.cross_entropy(model(x), y, label_smoothing=a.label_smoothing).item())

    out = [torch.tensor(losses, dtype=torch.float64)]
    out += [p.detach().to(torch.float64).contiguous().flatten() for p in model.parameters()]
    out += [b.to(torch.float64).flatten() for b in model.buffers() if b.is_floating_point()]
    with open(os.path.join(a.dir, a.tag + ".out.bin"), "wb") as f:
        f.write(torch.cat(out).numpy().tobytes())


if __name__ == "__main__":
    main()
