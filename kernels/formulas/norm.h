#pragma once
// RMSNorm / LayerNorm per-row statistics and per-element outputs, in double, as kernels/cpu/norms.cc computes
// them (see norms.h there for the math and shapes).
//
// The row sums (sum x^2, sum x, sum (x - mean)^2, the backward dots) and the dw/db column sums are reductions:
// the kernels accumulate them in double in a fixed tree order (deterministic, but not the CPU loop's order), then
// these functions turn them into the same per-element results the CPU computes. eps arrives as the Backend's
// double and is rounded to float first, as CpuBackend does before calling the CPU reference.

#include <cmath>
#include <cstdint>

#include "kernels/formulas/host_device.h"

namespace tptune::formulas {

// 1 / sqrt(mean + eps), mean = sum / dim (of x^2 for RMSNorm, of (x - mean)^2 for LayerNorm).
TPTUNE_HD double norm_rstd(double sum, int64_t dim, float eps) { return 1.0 / ::sqrt(sum / double(dim) + double(eps)); }

// RMSNorm forward: y = x * rstd * w.
TPTUNE_HD double rmsnorm_y(float x, double r, float w) { return double(x) * r * double(w); }

// RMSNorm backward, per element of row t: the dot's addend (dy * w * xhat), dw's addend (dy * xhat), and
// dx = rstd * (dy * w - x * rstd * c) with c = dot / dim.
TPTUNE_HD double rmsnorm_dot_term(float x, float w, float dy, double r) {
  return double(dy) * double(w) * (double(x) * r);
}
TPTUNE_HD double rmsnorm_dw_term(float x, float dy, double r) { return double(dy) * (double(x) * r); }
TPTUNE_HD double rmsnorm_dx(float x, float w, float dy, double r, double c) {
  return r * (double(dy) * double(w) - double(x) * r * c);
}

// LayerNorm forward: y = (x - mean) * rstd * w + b.
TPTUNE_HD double layernorm_y(float x, double mu, double r, float w, float b) {
  return (double(x) - mu) * r * double(w) + double(b);
}

// LayerNorm backward, with xhat = (x - mean) * rstd and g = dy * w: dx = rstd * (g - mean(g) - xhat * mean(g xhat)).
TPTUNE_HD double layernorm_xhat(float x, double mu, double r) { return (double(x) - mu) * r; }
TPTUNE_HD double layernorm_dx(float w, float dy, double xhat, double r, double mg, double mgx) {
  return r * (double(dy) * double(w) - mg - xhat * mgx);
}

}  // namespace tptune::formulas
