#!/usr/bin/env python3
"""The PyTorch peer of bench_cpu_train.sh and bench_ddp_mnist.sh: examples/mnist's CNN (ember's
models::mnist_cnn, dropout included) trained on the first N Fashion-MNIST training images with Adam
lr 1e-3, as one process or as one DDP rank under torchrun (gloo, CPU). Prints one line per epoch
and, at the end, the last epoch's training images/s over all ranks as
"RESULT images_per_second=<x>". With --test-limit M (one process) it then evaluates the first M
test images at --test-batch (1000, as ember's configs) and prints "RESULT eval_images_per_second=<x>".

  python3 torch_mnist.py --data DIR --limit N --batch B --epochs E [--test-limit M]   # one process
  torchrun --nproc-per-node 2 torch_mnist.py ... --ddp                                # DDP, B per rank
"""
import argparse
import gzip
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim :]), dtype=torch.uint8).reshape(dims)


def find(data, stem):
    for name in (stem, stem + ".gz"):
        if os.path.exists(os.path.join(data, name)):
            return os.path.join(data, name)
    raise SystemExit(f"no {stem} in {data}")


class Net(nn.Module):  # examples/mnist's network, as models::mnist_cnn
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(0.25)
        self.drop2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv1(x))))
        x = self.drop1(F.max_pool2d(x, 2))
        x = self.drop2(F.relu(self.fc1(torch.flatten(x, 1))))
        return self.fc2(x)


def evaluate(model, a):
    """Test-set forward passes without gradients, as ember's evaluation: images/s and accuracy."""
    x = read_idx(find(a.data, "t10k-images-idx3-ubyte"))[: a.test_limit].float().div_(255).sub_(0.2860).div_(0.3530)
    x = x.unsqueeze(1)
    y = read_idx(find(a.data, "t10k-labels-idx1-ubyte"))[: a.test_limit].long()
    model.eval()
    correct = 0
    t0 = time.perf_counter()
    with torch.no_grad():
        for i in range(0, len(x), a.test_batch):
            correct += (model(x[i : i + a.test_batch]).argmax(1) == y[i : i + a.test_batch]).sum().item()
    seconds = time.perf_counter() - t0
    model.train()
    print(f"eval: {len(x)} images, accuracy {correct / len(x):.4f}, {seconds:.3f} s")
    return len(x) / seconds


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--limit", type=int, default=8000)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--test-limit", type=int, default=0)
    p.add_argument("--test-batch", type=int, default=1000)
    p.add_argument("--ddp", action="store_true")
    a = p.parse_args()
    rank, world = 0, 1
    if a.ddp:
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(1)
    x = read_idx(find(a.data, "train-images-idx3-ubyte"))[: a.limit].float().div_(255).sub_(0.2860).div_(0.3530)
    x = x.unsqueeze(1)
    y = read_idx(find(a.data, "train-labels-idx1-ubyte"))[: a.limit].long()
    model = Net()
    net = nn.parallel.DistributedDataParallel(model) if a.ddp else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ips = 0.0
    for epoch in range(1, a.epochs + 1):
        g = torch.Generator().manual_seed(epoch)
        order = torch.randperm(a.limit, generator=g)[rank::world]  # this rank's share
        t0 = time.perf_counter()
        for i in range(0, len(order), a.batch):
            idx = order[i : i + a.batch]
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - t0
        images = torch.tensor([float(len(order)), seconds])
        if a.ddp:
            dist.all_reduce(images)  # images summed; seconds summed (divided below)
            images[1] /= world
        ips = images[0].item() / images[1].item()
        if rank == 0:
            print(f"epoch {epoch}: {ips:.0f} images/s, loss {loss.item():.4f}, threads {torch.get_num_threads()}")
    if rank == 0:
        print(f"RESULT images_per_second={ips:.1f}")
    if a.test_limit > 0 and not a.ddp:
        print(f"RESULT eval_images_per_second={evaluate(model, a):.1f}")
    if a.ddp:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
