// SwiGLU / GELU CPU reference; see activations.h for the math. The per-element formulas are the ones the CUDA
// kernels compute (kernels/formulas/activation.h), in double.
#include "kernels/cpu/activations.h"

#include "kernels/formulas/activation.h"

namespace tptune::kernels {

void swiglu(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(formulas::swiglu_fwd_elem<double>(a[i], b[i]));
}

void swiglu_bwd(const float* a, const float* b, const float* dy, int64_t n, float* da, float* db) {
  for (int64_t i = 0; i < n; ++i) {
    const auto g = formulas::swiglu_bwd_elem<double>(a[i], b[i], dy[i]);  // reads all before writing: da/db may alias
    da[i] = float(g.da);
    db[i] = float(g.db);
  }
}

void gelu(const float* a, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = float(formulas::gelu_fwd_elem<double>(a[i]));
}

void gelu_bwd(const float* a, const float* dy, int64_t n, float* da) {
  for (int64_t i = 0; i < n; ++i) da[i] = float(formulas::gelu_bwd_elem<double>(a[i], dy[i]));
}

}  // namespace tptune::kernels
