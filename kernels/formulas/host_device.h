#pragma once
// kernels/formulas/: the per-element formulas the CUDA kernels (kernels/cuda/) compute, in namespace
// tptune::formulas, plain headers that build without the CUDA toolkit. TPTUNE_HD marks them `__host__ __device__`
// under nvcc and plain inline functions under a host compiler, so that the same source is both what the CUDA kernels
// compute and what the host tests (tests/kernels/formulas*_test.cc, built everywhere) compare bit-for-bit with the
// CPU reference kernels of kernels/cpu/.
//
// These headers include nothing from the CUDA toolkit: bf16 and float8 values are handled as their bit
// patterns (uint16_t, uint8_t), floats as float/double. Transcendentals come from <cmath> on the host and from
// CUDA's math library on the device (the device's double exp/tanh/sin/cos are within 1-2 ulp of glibc's, so a
// double formula rounded to float agrees with the CPU reference except on rare rounding boundaries; the device tests
// use tolerances for those, the host tests are exact).

#if defined(__CUDACC__)
#define TPTUNE_HD __host__ __device__ __forceinline__
#else
#define TPTUNE_HD inline
#endif

#include <cmath>

namespace tptune::formulas {

// exp and tanh overloaded on the compute type (the formulas are templates on it): libm's double and float
// functions on the host, CUDA's on the device.
TPTUNE_HD double math_exp(double x) { return ::exp(x); }
TPTUNE_HD float math_exp(float x) { return ::expf(x); }
TPTUNE_HD double math_tanh(double x) { return ::tanh(x); }
TPTUNE_HD float math_tanh(float x) { return ::tanhf(x); }

}  // namespace tptune::formulas
