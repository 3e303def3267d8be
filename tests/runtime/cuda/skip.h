#pragma once
// Every [cuda] runtime test starts with TPTUNE_CUDA_OR_SKIP(): without a usable device it prints one line,
// "no CUDA device visible: skipped (<reason>)", and returns, so that it passes as skipped where no GPU is.
#include <catch2/catch.hpp>

#include "runtime/cuda/cuda_backend.h"

#define TPTUNE_CUDA_OR_SKIP()                                                                  \
  do {                                                                                         \
    if (::tptune::cuda_device_count() == 0) {                                                  \
      WARN("no CUDA device visible: skipped (" << ::tptune::cuda_unavailable_reason() << ")"); \
      return;                                                                                  \
    }                                                                                          \
  } while (0)
