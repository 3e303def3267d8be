#pragma once
// Storage -> element type dispatch for the CUDA backend: a call on a DevPtr runs the kernels/cuda launcher
// instantiated for its storage (float, __nv_bfloat16, __nv_fp8_e4m3, __nv_fp8_e5m2), or throws tptune::Error
// naming the call and the storage it cannot take.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "runtime/backend.h"

namespace tptune::cudabe {

template <class T>
struct Type {
  using type = T;
};

[[noreturn]] void unsupported_storage(const char* call, Storage s, const char* expected);

// fn(Type<T>{}) with T the element type of p's storage: float, __nv_bfloat16 and, when Float8, the two float8
// types; any other storage throws, naming the call and `expected`.
template <bool Float8, class Fn>
void dispatch_storage(DevPtr p, const char* call, const char* expected, Fn&& fn) {
  switch (p.storage) {
    case Storage::f32:
      return fn(Type<float>{});
    case Storage::bf16:
      return fn(Type<__nv_bfloat16>{});
    case Storage::fp8_e4m3:
      if constexpr (Float8) return fn(Type<__nv_fp8_e4m3>{});
      break;
    case Storage::fp8_e5m2:
      if constexpr (Float8) return fn(Type<__nv_fp8_e5m2>{});
      break;
    default:
      break;
  }
  unsupported_storage(call, p.storage, expected);
}

// Activations, weights, gradients: f32 or bf16.
template <class Fn>
void floating(DevPtr p, const char* call, Fn&& fn) {
  dispatch_storage<false>(p, call, "f32 or bf16", fn);
}

// Every floating storage (conversions).
template <class Fn>
void any_storage(DevPtr p, const char* call, Fn&& fn) {
  dispatch_storage<true>(p, call, "a floating-point storage", fn);
}

template <class T>
constexpr Storage storage_of() {
  if constexpr (std::is_same_v<T, float>) return Storage::f32;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return Storage::bf16;
  if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) return Storage::fp8_e4m3;
  if constexpr (std::is_same_v<T, __nv_fp8_e5m2>) return Storage::fp8_e5m2;
  return Storage::i32;
}

// The typed pointer of an operand that must have the same storage as the one dispatched on.
template <class T>
T* as(DevPtr p, const char* call) {
  if (p.storage != storage_of<T>()) unsupported_storage(call, p.storage, "the storage of the call's first operand");
  return static_cast<T*>(p.ptr);
}

}  // namespace tptune::cudabe
