#!/usr/bin/python3
"""Whole-network forward time of torchvision models in PyTorch, timed as users run it.

    /usr/bin/python3 bench/torchvision/torch_forward.py THREADS NAME:SIZE [NAME:SIZE ...]

For each spec: torch.manual_seed(0), torchvision.models.NAME(weights=None).eval() (the weights
scripts/torchvision_models.py exports), input 1x3xSIZExSIZE, torch.no_grad(), torch.set_num_threads
(THREADS); best of 10 forwards after 3 warm-ups, in NCHW and in channels_last, the faster kept.
Prints one line per spec: "NAME:SIZE <best seconds> <nchw seconds> <channels_last seconds>".
Run by kiln_torchvision_bench (bench/torchvision/torchvision_bench.cc) in the same run as Kiln.
"""

import sys
import time

import torch
import torchvision

WARMUP = 3
REPEAT = 10


def best_of(model, x):
    with torch.no_grad():
        for _ in range(WARMUP):
            model(x)
        best = float("inf")
        for _ in range(REPEAT):
            t0 = time.perf_counter()
            model(x)
            best = min(best, time.perf_counter() - t0)
    return best


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    torch.set_num_threads(int(argv[1]))
    for spec in argv[2:]:
        name, size = spec.split(":")[:2]
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(weights=None).eval()
        x = torch.randn(1, 3, int(size), int(size))
        nchw = best_of(model, x)
        cl_model = model.to(memory_format=torch.channels_last)
        cl = best_of(cl_model, x.contiguous(memory_format=torch.channels_last))
        print(f"{spec} {min(nchw, cl):.6f} {nchw:.6f} {cl:.6f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
