#pragma once
// RoPE per pair: the inverse frequency of pair i, and the rotation of one adjacent pair (x[2i], x[2i+1]).
//
// Exactly the arithmetic of kernels/cpu/rope.cc (see rope.h there for the convention): angles, cos and sin and the
// rotation in double, the result rounded to the storage type once. Forward rotates by +a, backward by -a
// (sign = -1 multiplies sin by -1 exactly, as the CPU table does). Kernels compute cos/sin once per (token, pair)
// and apply them to every head of the token.

#include <cmath>
#include <cstdint>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

// theta^(-2i/head_dim).
TPTUNE_HD double rope_inv_freq(int64_t i, int64_t head_dim, double theta) {
  return ::pow(theta, -2.0 * double(i) / double(head_dim));
}

// The angle of pair i at global position pos.
TPTUNE_HD double rope_angle(int64_t pos, int64_t i, int64_t head_dim, double theta) {
  return double(pos) * rope_inv_freq(i, head_dim, theta);
}

struct RopePair {
  double y0, y1;
};

// (x0, x1) rotated by the angle whose cosine is c and signed sine is sn (sn = sign * sin a).
TPTUNE_HD RopePair rope_rotate(double x0, double x1, double c, double sn) {
  return {x0 * c - x1 * sn, x0 * sn + x1 * c};
}

}  // namespace tptune::formulas
