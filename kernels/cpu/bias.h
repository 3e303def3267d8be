#pragma once
// A Linear's bias, forward and backward (CPU reference).
//
// Contract (ElementwiseOp):
//   bias_add   {x, b} -> {y}: y[r, c] = x[r, c] + b[c] / split, for the rows r of x (rows, n) (the tokens of a
//              (batch, seq, n) linear output) and b (n). split is 1, or tp when x is a Partial sum over TP (each rank
//              then adds its share of the bias, so that the reduction holds it once).
//   bias_grad  {dy} -> {db}: db[c] = sum over r of dy[r, c].
// Outputs are written, never accumulated into; y may alias x. Sums are in double, stored as float (the order of the
// rows does not change the result beyond one rounding).
// Cost (napkin): bias_add reads rows*n + n and writes rows*n elements; bias_grad reads rows*n and writes n.

#include <cstdint>

namespace tptune::kernels {

// x (rows, n), b (n) -> y (rows, n) = x + b / split.
void bias_add(const float* x, const float* b, int64_t rows, int64_t n, int split, float* y);
// dy (rows, n) -> db (n) = the column sums of dy.
void bias_grad(const float* dy, int64_t rows, int64_t n, float* db);

}  // namespace tptune::kernels
