// Elementwise CUDA kernels; see elementwise.h. Every kernel is a map over 16-byte packs of its arrays
// (detail::packed_map_kernel): one vector load per input and one vector store per output for 8 bf16 or 4 fp32
// elements, one element at a time only for a view at an unaligned offset.
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/device/check.h"
#include "kernels/cuda/device/device_element.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/formulas/activation.h"

namespace tptune::cuda {

using namespace formulas;  // the per-element formulas the CPU reference shares (kernels/formulas/)
namespace {

using namespace kernel_names;  // kernels/cuda/device/device_element.cuh

// Each functor maps pack k of its arrays (see detail::packed_map_kernel): every input pack is loaded before any
// output pack is stored, so outputs may alias inputs element for element.

// y = f(a, b) element for element: both inputs widened to Compute<T> (the formulas' arithmetic, kernels/formulas/),
// f's result rounded to T. The binary maps (add, swiglu_fwd, gelu_bwd) differ only in f, below.
template <class T, class F>
struct BinaryPacks {
  const T* a;
  const T* b;
  T* y;
  F f;
  template <int N>
  __device__ void apply(int64_t k) const {
    using C = Compute<T>;
    const Pack<T, N> pa = load_pack<N>(a, k), pb = load_pack<N>(b, k);
    Pack<T, N> py;
#pragma unroll
    for (int j = 0; j < N; ++j) py.v[j] = from_float<T>(float(f(C(to_float(pa.v[j])), C(to_float(pb.v[j])))));
    store_pack<N>(y, k, py);
  }
};

// add: one float addition whatever T computes in (the inputs are exact in float), as the CPU reference rounds it.
struct Add {
  template <class C>
  __device__ float operator()(C a, C b) const {
    return float(a) + float(b);
  }
};

struct SwigluFwd {
  template <class C>
  __device__ C operator()(C a, C b) const {
    return swiglu_fwd_elem(a, b);
  }
};

// gelu_bwd: f(a, dy).
struct GeluBwd {
  template <class C>
  __device__ C operator()(C a, C dy) const {
    return gelu_bwd_elem(a, dy);
  }
};

template <class T>
struct FillPacks {
  T* y;
  T value;
  template <int N>
  __device__ void apply(int64_t k) const {
    Pack<T, N> py;
#pragma unroll
    for (int j = 0; j < N; ++j) py.v[j] = value;
    store_pack<N>(y, k, py);
  }
};

template <class T>
struct SwigluBwdPacks {
  const T* a;
  const T* b;
  const T* dy;
  T* da;
  T* db;
  template <int N>
  __device__ void apply(int64_t k) const {
    using C = Compute<T>;
    const Pack<T, N> pa = load_pack<N>(a, k), pb = load_pack<N>(b, k), pdy = load_pack<N>(dy, k);
    Pack<T, N> pda, pdb;
#pragma unroll
    for (int j = 0; j < N; ++j) {
      const SwigluGrad<C> g = swiglu_bwd_elem(C(to_float(pa.v[j])), C(to_float(pb.v[j])), C(to_float(pdy.v[j])));
      pda.v[j] = from_float<T>(float(g.da));
      pdb.v[j] = from_float<T>(float(g.db));
    }
    store_pack<N>(da, k, pda);  // after all three loads: da/db may alias the inputs
    store_pack<N>(db, k, pdb);
  }
};

template <class T>
struct GeluFwdPacks {
  const T* a;
  T* y;
  template <int N>
  __device__ void apply(int64_t k) const {
    using C = Compute<T>;
    const Pack<T, N> pa = load_pack<N>(a, k);
    Pack<T, N> py;
#pragma unroll
    for (int j = 0; j < N; ++j) py.v[j] = from_float<T>(float(gelu_fwd_elem(C(to_float(pa.v[j])))));
    store_pack<N>(y, k, py);
  }
};

// Launches f over n elements with 16-byte packs when every pointer allows it.
template <class T, class F>
void launch(cudaStream_t stream, int64_t n, const F& f, std::initializer_list<const void*> pointers,
            const char* kernel) {
  require(n >= 0, kernel, "negative element count");
  if (n == 0) return;
  bool aligned = true;
  for (const void* p : pointers) aligned = aligned && pack_aligned(p, sizeof(T), detail::kPack<T>);
  launch_packed_map<detail::kPack<T>>(stream, n, aligned, f);
  check_launch(kernel);
}

}  // namespace

template <class T>
void add(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  launch<T>(stream, n, BinaryPacks<T, Add>{a, b, y, Add{}}, {a, b, y}, "add");
}

template <class T>
void accumulate(cudaStream_t stream, int64_t n, const T* a, T* y) {
  // y = y + a, the same rounding as add
  launch<T>(stream, n, BinaryPacks<T, Add>{y, a, y, Add{}}, {a, y}, "accumulate");
}

template <class T>
void fill(cudaStream_t stream, T* y, int64_t n, float value) {
  // The value rounded to T on the host, as from_float rounds it on the device (kernels/formulas/bf16.h).
  T v;
  if constexpr (std::is_same_v<T, float>)
    v = value;
  else
    v = __ushort_as_bfloat16(formulas::float_to_bf16_bits(value));
  launch<T>(stream, n, FillPacks<T>{y, v}, {y}, "fill");
}

template <class T>
void swiglu_fwd(cudaStream_t stream, int64_t n, const T* a, const T* b, T* y) {
  launch<T>(stream, n, BinaryPacks<T, SwigluFwd>{a, b, y, SwigluFwd{}}, {a, b, y}, "swiglu_fwd");
}

template <class T>
void swiglu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* b, const T* dy, T* da, T* db) {
  launch<T>(stream, n, SwigluBwdPacks<T>{a, b, dy, da, db}, {a, b, dy, da, db}, "swiglu_bwd");
}

template <class T>
void gelu_fwd(cudaStream_t stream, int64_t n, const T* a, T* y) {
  launch<T>(stream, n, GeluFwdPacks<T>{a, y}, {a, y}, "gelu_fwd");
}

template <class T>
void gelu_bwd(cudaStream_t stream, int64_t n, const T* a, const T* dy, T* da) {
  launch<T>(stream, n, BinaryPacks<T, GeluBwd>{a, dy, da, GeluBwd{}}, {a, dy, da}, "gelu_bwd");
}

#define TPTUNE_INSTANTIATE(T)                                                               \
  template void add<T>(cudaStream_t, int64_t, const T*, const T*, T*);                      \
  template void accumulate<T>(cudaStream_t, int64_t, const T*, T*);                         \
  template void fill<T>(cudaStream_t, T*, int64_t, float);                                  \
  template void swiglu_fwd<T>(cudaStream_t, int64_t, const T*, const T*, T*);               \
  template void swiglu_bwd<T>(cudaStream_t, int64_t, const T*, const T*, const T*, T*, T*); \
  template void gelu_fwd<T>(cudaStream_t, int64_t, const T*, T*);                           \
  template void gelu_bwd<T>(cudaStream_t, int64_t, const T*, const T*, T*);
TPTUNE_INSTANTIATE(float)
TPTUNE_INSTANTIATE(__nv_bfloat16)

}  // namespace tptune::cuda
