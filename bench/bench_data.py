#!/usr/bin/env python3
"""The bench data generator of runtime/bench_data.h in Python, bit for bit, so that PyTorch times the same values.

value(seed, name, i) = std * sqrt(3) * u, u = seeded_uniform(seed, name, i) in [-1, 1) (runtime/tensor_init.cc):
  key = splitmix64(seed ^ splitmix64(fnv1a64(name))); bits = splitmix64(key + i); u = (bits >> 40) * 2^-23 - 1.
std is 1 for activations and gradients, 0.02 for weights. `python3 bench/bench_data.py --self-test` checks the first
values against the ones tests/runtime/bench_kernels_test.cc pins for the C++ generator.
"""
import sys

M64 = (1 << 64) - 1
ACTIVATION_STD, WEIGHT_STD = 1.0, 0.02


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def key_of(seed, name):
    h = 0xCBF29CE484222325
    for c in name.encode():
        h = ((h ^ c) * 0x100000001B3) & M64
    return splitmix64((seed ^ splitmix64(h)) & M64)


def uniform(seed, name, i):
    """One draw, in pure Python (float32 arithmetic emulated: the product of a 24-bit integer and 2^-23 is exact)."""
    return (splitmix64((key_of(seed, name) + i) & M64) >> 40) * (2.0 / 16777216.0) - 1.0


def _signed(c):
    return c - (1 << 64) if c >= (1 << 63) else c


def values(seed, name, n, std, torch=None, device="cpu"):
    """n values as a float32 torch tensor on `device` (int64 arithmetic wraps like uint64; right shifts are masked
    to be logical), or as a numpy array when torch is None."""
    if torch is None:
        import numpy as np
        key = np.uint64(key_of(seed, name))
        with np.errstate(over="ignore"):
            x = np.arange(n, dtype=np.uint64) + key
            x = x + np.uint64(0x9E3779B97F4A7C15)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            x = x ^ (x >> np.uint64(31))
        u = (x >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / 16777216.0) - np.float32(1.0)
        return (np.float32(std) * np.float32(3.0 ** 0.5)) * u

    def shr(t, k):  # logical shift right of int64 holding uint64 bits
        return (t >> k) & ((1 << (64 - k)) - 1)

    x = torch.arange(n, dtype=torch.int64, device=device) + _signed(key_of(seed, name))
    x = x + _signed(0x9E3779B97F4A7C15)
    x = (x ^ shr(x, 30)) * _signed(0xBF58476D1CE4E5B9)
    x = (x ^ shr(x, 27)) * _signed(0x94D049BB133111EB)
    x = x ^ shr(x, 31)
    u = shr(x, 40).to(torch.float32) * (2.0 / 16777216.0) - 1.0
    return (torch.tensor(std, dtype=torch.float32) * torch.tensor(3.0 ** 0.5, dtype=torch.float32)).to(device) * u


# The first draws of seed 20261204, operand "x" (tests/runtime/bench_kernels_test.cc pins the same).
PINNED = [0.848635793, -0.972029448, 0.466910243, -0.397878408]


def self_test():
    got = [uniform(20261204, "x", i) for i in range(4)]
    try:
        import torch
        t = values(20261204, "x", 4, 1.0 / 3.0 ** 0.5, torch=torch).tolist()  # std 1/sqrt(3): u itself
        print("torch port:", ", ".join(f"{v:.9g}" for v in t))
        if any(abs(a - b) > 1e-7 for a, b in zip(t, got)):
            print("MISMATCH between the torch port and the scalar one")
            return 1
    except ImportError:
        pass
    print("seeded_uniform(20261204, 'x', 0..3) =", ", ".join(f"{v:.9g}" for v in got))
    if any(abs(g - p) > 5e-9 for g, p in zip(got, PINNED)):
        print("MISMATCH with", PINNED)
        return 1
    return 0


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        sys.exit(self_test())
    print(__doc__)
