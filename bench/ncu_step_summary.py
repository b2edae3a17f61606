#!/usr/bin/env python3
"""Sums the kernel durations of an ncu CSV (`ncu --csv --metrics gpu__time_duration.sum ...`) and
prints the GPU time per step and the kernels that take most of it.

  ncu --profile-from-start off --metrics gpu__time_duration.sum --csv --print-units base \\
      build-gpu/bin/bench_gpu_train --profile-steps 2 > ncu.csv
  bench/ncu_step_summary.py ncu.csv 2            # 2: the steps profiled

Kernel time per step beside the step's wall time (bench_gpu_train prints it) says where a step
goes: kernels, or gaps between them (launch and host overhead).
"""
import csv
import sys
from collections import defaultdict


def main():
    path, steps = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own messages are not CSV
    total, count, per_name = 0.0, 0, defaultdict(lambda: [0, 0.0])
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        ns = float(row["Metric Value"].replace(",", ""))
        name = row["Kernel Name"].split("(")[0][:90]
        total += ns
        count += 1
        per_name[name][0] += 1
        per_name[name][1] += ns
    if count == 0:
        print("ncu_step_summary: no gpu__time_duration.sum rows in", path)
        return 1
    print(f"kernels: {count / steps:.0f} per step, {total / steps / 1e6:.3f} ms of kernel time per step")
    print(f"{'kernel':90} {'per step':>8} {'ms/step':>8}")
    for name, (n, ns) in sorted(per_name.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"{name:90} {n / steps:8.0f} {ns / steps / 1e6:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
