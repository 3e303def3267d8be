#pragma once
// The CUDA kernels of tptune (the CUDA sources of tptune_kernels, namespace tptune::cuda), one header per concept. Each
// launcher mirrors a Backend call of runtime/backend.h with typed device pointers and a stream first; each kernel
// has its CPU reference in kernels/cpu/ and a [cuda] test in tests/kernels/cuda/. Built only when the CUDA toolkit
// is found (cmake/cuda.cmake sets TPTUNE_HAVE_CUDA).
//
// Element types: T = float or __nv_bfloat16 for activations, weights and gradients; fp32 for statistics, optimizer
// state and master weights; int32 for ids and targets; __nv_fp8_e4m3 / __nv_fp8_e5m2 for float8 storage.

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/copy.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/float8.h"
#include "kernels/cuda/norms.h"
#include "kernels/cuda/rope.h"
