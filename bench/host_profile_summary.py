#!/usr/bin/env python3
"""Summarizes the host stacks that `bench_gpu_train --host-samples FILE` wrote (bench/host_sampler.h).

    bench/host_profile_summary.py FILE [--symbols DIR] [--top N]

Each line of FILE is one sample (1 ms of process CPU time), innermost frame first, frames as
`module+0xoffset:nearest-dynamic-symbol`. Frames of modules that have an unstripped copy in DIR
(default build-gpu/symbols, kept by scripts/gpu/prebuild.sh) are named by addr2line (function, with
inlined frames folded into their caller); the others keep the dynamic symbol dladdr found, which for
a stripped library (libcudnn, libcuda) is only the nearest exported name: read those by module.
Prints the share of samples by module (self), by function (self) and by function (inclusive: a
function counts once per stack it appears in).
"""
import argparse
import collections
import os
import subprocess
import sys


def symbolize(module_path, offsets):
    """offset -> function name for one unstripped ELF file, by one addr2line call."""
    offsets = sorted(offsets)
    out = subprocess.run(['addr2line', '-f', '-C', '-e', module_path] + [hex(o) for o in offsets],
                         capture_output=True, text=True, check=False).stdout.splitlines()
    names = {}
    for i, o in enumerate(offsets):  # two lines per address: function, file:line
        name = out[2 * i] if 2 * i < len(out) else '??'
        names[o] = name
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('samples')
    ap.add_argument('--symbols', default='build-gpu/symbols')
    ap.add_argument('--top', type=int, default=40)
    args = ap.parse_args()

    stacks = []
    for line in open(args.samples):
        frames = []
        for f in line.rstrip('\n').split(';'):
            if not f:
                continue
            where, _, sym = f.partition(':')
            module, _, off = where.rpartition('+')
            frames.append((module, int(off, 16), sym))
        stacks.append(frames)
    if not stacks:
        sys.exit(f'{args.samples}: no samples')

    by_module = collections.defaultdict(set)
    for frames in stacks:
        for module, off, _ in frames:
            by_module[module].add(off)
    names = {}
    for module, offs in by_module.items():
        path = os.path.join(args.symbols, module)
        if os.path.isfile(path):
            for off, name in symbolize(path, offs).items():
                names[(module, off)] = name

    def name_of(module, off, sym):
        n = names.get((module, off))
        if n and n != '??':
            return n
        return f'[{module}] {sym}'

    n = len(stacks)
    self_module = collections.Counter(frames[0][0] if frames else '?' for frames in stacks)
    self_fn = collections.Counter()
    incl_fn = collections.Counter()
    for frames in stacks:
        if not frames:
            continue
        self_fn[name_of(*frames[0])] += 1
        for fn in {name_of(*f) for f in frames}:
            incl_fn[fn] += 1

    def table(title, counter):
        print(f'\n{title} ({n} samples)')
        for name, c in counter.most_common(args.top):
            print(f'{100.0 * c / n:6.1f}%  {name[:160]}')

    table('self, by module', self_module)
    table('self, by function', self_fn)
    table('inclusive, by function', incl_fn)


if __name__ == '__main__':
    main()
