// RMSNorm / LayerNorm CPU reference; see norms.h for the math.
#include "kernels/cpu/norms.h"

#include <cmath>
#include <vector>

#include "kernels/formulas/norm.h"

namespace tptune::kernels {

void rmsnorm(const float* x, const float* w, int64_t rows, int64_t dim, float eps, float* y, float* rstd) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += double(xr[i]) * xr[i];
    const double r = 1.0 / std::sqrt(ss / double(dim) + double(eps));
    rstd[t] = float(r);
    float* yr = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = float(xr[i] * r * w[i]);
  }
}

void rmsnorm_bwd(const float* x, const float* w, const float* rstd, const float* dy, int64_t rows, int64_t dim,
                 float* dx, float* dw) {
  std::vector<double> dw_acc(size_t(dim), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    const float* dyr = dy + t * dim;
    const double r = rstd[t];
    // mean(g * xhat) with g = dy * w, xhat = x * rstd.
    double dot = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = xr[i] * r;
      dot += double(dyr[i]) * w[i] * xhat;
      dw_acc[size_t(i)] += double(dyr[i]) * xhat;
    }
    const double c = dot / double(dim);
    float* dxr = dx + t * dim;
    for (int64_t i = 0; i < dim; ++i) dxr[i] = float(r * (double(dyr[i]) * w[i] - xr[i] * r * c));
  }
  for (int64_t i = 0; i < dim; ++i) dw[i] = float(dw_acc[size_t(i)]);
}

void add_rmsnorm(const float* a, const float* b, const float* w, int64_t rows, int64_t dim, float eps, float* h,
                 float* y, float* rstd) {
  for (int64_t t = 0; t < rows; ++t) {
    const float *ar = a + t * dim, *br = b + t * dim;
    float* hr = h + t * dim;
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      hr[i] = ar[i] + br[i];
      ss += double(hr[i]) * hr[i];
    }
    const double r = formulas::norm_rstd(ss, dim, eps);
    rstd[t] = float(r);
    float* yr = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = float(formulas::rmsnorm_y(hr[i], r, w[i]));
  }
}

void rmsnorm_bwd_add(const float* x, const float* w, const float* rstd, const float* dy, const float* dres,
                     int64_t rows, int64_t dim, float* dx, float* dw) {
  std::vector<double> dw_acc(size_t(dim), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const float *xr = x + t * dim, *dyr = dy + t * dim, *dr = dres + t * dim;
    const double r = rstd[t];
    double dot = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      dot += formulas::rmsnorm_dot_term(xr[i], w[i], dyr[i], r);
      dw_acc[size_t(i)] += formulas::rmsnorm_dw_term(xr[i], dyr[i], r);
    }
    const double c = dot / double(dim);
    float* dxr = dx + t * dim;
    for (int64_t i = 0; i < dim; ++i) dxr[i] = dr[i] + float(formulas::rmsnorm_dx(xr[i], w[i], dyr[i], r, c));
  }
  for (int64_t i = 0; i < dim; ++i) dw[i] = float(dw_acc[size_t(i)]);
}

void layernorm(const float* x, const float* w, const float* b, int64_t rows, int64_t dim, float eps, float* y,
               float* mean, float* rstd) {
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    double s = 0.0;
    for (int64_t i = 0; i < dim; ++i) s += xr[i];
    const double mu = s / double(dim);
    // Two-pass variance: no cancellation when |mean| >> std.
    double ss = 0.0;
    for (int64_t i = 0; i < dim; ++i) ss += (xr[i] - mu) * (xr[i] - mu);
    const double r = 1.0 / std::sqrt(ss / double(dim) + double(eps));
    mean[t] = float(mu);
    rstd[t] = float(r);
    float* yr = y + t * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] = float((xr[i] - mu) * r * w[i] + b[i]);
  }
}

void layernorm_bwd(const float* x, const float* w, const float* mean, const float* rstd, const float* dy, int64_t rows,
                   int64_t dim, float* dx, float* dw, float* db) {
  std::vector<double> dw_acc(size_t(dim), 0.0), db_acc(size_t(dim), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const float* xr = x + t * dim;
    const float* dyr = dy + t * dim;
    const double mu = mean[t], r = rstd[t];
    double sum_g = 0.0, sum_gx = 0.0;  // sum(g), sum(g * xhat)
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * r;
      const double g = double(dyr[i]) * w[i];
      sum_g += g;
      sum_gx += g * xhat;
      dw_acc[size_t(i)] += double(dyr[i]) * xhat;
      db_acc[size_t(i)] += dyr[i];
    }
    const double mg = sum_g / double(dim), mgx = sum_gx / double(dim);
    float* dxr = dx + t * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double xhat = (xr[i] - mu) * r;
      dxr[i] = float(r * (double(dyr[i]) * w[i] - mg - xhat * mgx));
    }
  }
  for (int64_t i = 0; i < dim; ++i) {
    dw[i] = float(dw_acc[size_t(i)]);
    db[i] = float(db_acc[size_t(i)]);
  }
}

}  // namespace tptune::kernels
