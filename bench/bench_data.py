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


def values(seed, name, n, std, torch=None, device="cpu"):
    """n values as a float32 torch tensor (numpy when torch is None), generated with 64-bit integer arithmetic."""
    import numpy as np
    key = np.uint64(key_of(seed, name))
    with np.errstate(over="ignore"):
        x = np.arange(n, dtype=np.uint64) + key
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    u = (x >> np.uint64(40)).astype(np.float32) * np.float32(2.0 / 16777216.0) - np.float32(1.0)
    v = (np.float32(std) * np.float32(3.0 ** 0.5)) * u
    if torch is None:
        return v
    return torch.from_numpy(v).to(device)


# The first draws of seed 20261204, operand "x" (tests/runtime/bench_kernels_test.cc pins the same).
PINNED = [0.848635793, -0.972029448, 0.466910243, -0.397878408]


def self_test():
    got = [uniform(20261204, "x", i) for i in range(4)]
    print("seeded_uniform(20261204, 'x', 0..3) =", ", ".join(f"{v:.9g}" for v in got))
    if any(abs(g - p) > 5e-9 for g, p in zip(got, PINNED)):
        print("MISMATCH with", PINNED)
        return 1
    return 0


if __name__ == "__main__":
    if "--self-test" in sys.argv:
        sys.exit(self_test())
    print(__doc__)
