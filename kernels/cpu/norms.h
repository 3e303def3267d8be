#pragma once
// RMSNorm and LayerNorm over the last dim, forward and backward (CPU reference).
//
// Contract (ElementwiseOp in plans/program/program.h fixes the runtime's input/output order):
//   rmsnorm        {x, w}            -> {y, rstd}
//   rmsnorm_bwd    {x, w, rstd, dy}  -> {dx, dw}
//   layernorm      {x, w, b}         -> {y, mean, rstd}
//   layernorm_bwd  {x, w, mean, rstd, dy} -> {dx, dw, db}
// Shapes: x, y, dy, dx are (rows, dim) row-major (rows = tokens, b*s flattened); w, b, dw, db are (dim);
// mean and rstd are (rows). Every output is written, never accumulated into (dw/db are the sums over all rows of
// this call). Row statistics and the dw/db sums are accumulated in double; the results are stored as float.
//
// Math, with xhat the normalized row and g = dy * w:
//   rmsnorm:   rstd = 1/sqrt(mean(x^2) + eps),           xhat = x * rstd,           y = xhat * w
//              dx = rstd * (g - xhat * mean(g * xhat)),  dw = sum_rows dy * xhat
//   layernorm: mean = mean(x), var = mean((x-mean)^2) (biased), rstd = 1/sqrt(var + eps), xhat = (x-mean)*rstd,
//              y = xhat * w + b
//              dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), dw = sum_rows dy * xhat, db = sum_rows dy
// Cost (napkin): forward reads x and writes y, ~4 FLOPs per element; backward reads x, dy, writes dx, ~8 FLOPs.

#include <cstdint>

namespace tptune::kernels {

// x (rows, dim), w (dim) -> y (rows, dim), rstd (rows).
void rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd);

// x (rows, dim), w (dim), rstd (rows, from rmsnorm), dy (rows, dim) -> dx (rows, dim), dw (dim).
void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                 float* dx, float* dw);

// The fused kernels of a compiled Program (ElementwiseOp add_rmsnorm, rmsnorm_bwd_add; one pass each):
//   add_rmsnorm     h = a + b (float), then rmsnorm of h: exactly add() followed by rmsnorm()
//   rmsnorm_bwd_add dx = dres + rmsnorm_bwd's dx (that dx rounded to float first, then the float sum): exactly
//                   rmsnorm_bwd() followed by the residual gradient's add
// a, b (rows, dim), w (dim) -> h, y (rows, dim), rstd (rows).
void add_rmsnorm(const float* a, const float* b, const float* w, int64_t rows, int64_t dim, float eps, float* h,
                 float* y, float* rstd);
// x, dy, dres (rows, dim), w (dim), rstd (rows) -> dx (rows, dim), dw (dim).
void rmsnorm_bwd_add(const float* x, const float* w, const float* rstd, const float* dy, const float* dres,
                     int64_t rows, int64_t dim, float* dx, float* dw);
// x (rows, dim), w (dim), b (dim) -> y (rows, dim), mean (rows), rstd (rows).
void layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* y,
               float* mean, float* rstd);

// x (rows, dim), w (dim), mean, rstd (rows, from layernorm), dy (rows, dim) -> dx (rows, dim), dw (dim), db (dim).
void layernorm_bwd(const float* x, const float* w, const float* mean, const float* rstd, const float* dy, int64_t rows,
                   int64_t dim, float* dx, float* dw, float* db);

}  // namespace tptune::kernels
