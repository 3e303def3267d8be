#pragma once
// Helpers for the [cuda] kernel tests: skip when no device is visible, device buffers of a typed element with
// host-side conversion (through the same bf16/float8 formulas the kernels use), and per-type tolerances.
//
// Every test first calls TPTUNE_CUDA_TEST_OR_SKIP(): with no device (cudaGetDeviceCount returns 0 or an error, as
// on a build machine) it prints one line, "no CUDA device visible: skipped", and returns.

#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/formulas/bf16.h"
#include "kernels/formulas/float8.h"

namespace tptune::test {

inline bool cuda_device_visible() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define TPTUNE_CUDA_TEST_OR_SKIP()                \
  do {                                            \
    if (!::tptune::test::cuda_device_visible()) { \
      WARN("no CUDA device visible: skipped");    \
      return;                                     \
    }                                             \
  } while (0)

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

// Host float <-> element T (float, bf16, fp8 e4m3/e5m2, int32), bit-exact with the device conversions.
template <class T>
T to_elem(float x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return __nv_bfloat16(__nv_bfloat16_raw{formulas::float_to_bf16_bits(x)});
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    T r;
    r.__x = formulas::fp8_encode(x, formulas::Fp8::e4m3);
    return r;
  } else {
    static_assert(std::is_same_v<T, __nv_fp8_e5m2>);
    T r;
    r.__x = formulas::fp8_encode(x, formulas::Fp8::e5m2);
    return r;
  }
}
template <class T>
float from_elem(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return formulas::bf16_bits_to_float(__nv_bfloat16_raw(x).x);
  } else if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
    return formulas::fp8_decode(x.__x, formulas::Fp8::e4m3);
  } else {
    return formulas::fp8_decode(x.__x, formulas::Fp8::e5m2);
  }
}

// The values a T tensor holds for the host values v (what the CPU reference must be fed for a fair comparison).
template <class T>
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = from_elem(to_elem<T>(v[i]));
  return r;
}

// A device array of n elements of T (RAII).
template <class T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    cuda_ok(cudaMalloc(&p_, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    cuda_ok(cudaMemset(p_, 0, std::max<size_t>(n, 1) * sizeof(T)), "cudaMemset");
  }
  // Upload of host floats converted to T.
  explicit DeviceArray(const std::vector<float>& host) : DeviceArray(host.size()) {
    std::vector<T> h(host.size());
    for (size_t i = 0; i < host.size(); ++i) h[i] = to_elem<T>(host[i]);
    if (!h.empty()) cuda_ok(cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  }
  ~DeviceArray() { cudaFree(p_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  T* get() const { return p_; }
  size_t size() const { return n_; }
  // Download (synchronizes the device first, so earlier stream work is done), widened to float.
  std::vector<float> floats() const {
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> h(n_);
    if (n_ > 0) cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    std::vector<float> r(n_);
    for (size_t i = 0; i < n_; ++i) r[i] = from_elem(h[i]);
    return r;
  }
  std::vector<T> raw() const {
    cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<T> h(n_);
    if (n_ > 0) cuda_ok(cudaMemcpy(h.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

template <class T>
DeviceArray<T> upload_ints(const std::vector<T>& host) {
  DeviceArray<T> d(host.size());
  if (!host.empty())
    cuda_ok(cudaMemcpy(d.get(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  return d;
}

// Tolerances for a kernel whose CPU reference is fed the same (T-rounded) inputs:
// - float: the kernels do the reference's double arithmetic; what differs is the reduction order (double, so
//   ~1e-16 relative) and CUDA's libm vs glibc (<= 2 ulp in double), then one rounding to float: results agree to a
//   float ulp or two. rtol 1e-6 (~8 float ulps), atol 1e-7 for values that cancel towards 0.
// - bf16: the result is rounded once to bf16 (relative error <= 2^-9 = 0.2%), and for bf16 compute the kernel uses
//   float instead of double (~1e-6): rtol 8e-3 = two bf16 half-ulps, atol 1e-3 for the values near 0 whose
//   bf16 rounding of an intermediate (e.g. a gradient term) is absolute.
template <class T>
struct Tol {
  static constexpr double rtol = std::is_same_v<T, float> ? 1e-6 : 8e-3;
  static constexpr double atol = std::is_same_v<T, float> ? 1e-7 : 1e-3;
};

}  // namespace tptune::test
