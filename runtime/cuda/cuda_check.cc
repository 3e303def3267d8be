#include "runtime/cuda/cuda_check.h"

#include <fmt/format.h>

#include "plans/util/error.h"

namespace tptune::cudabe {

void throw_error(const char* where, const char* call, const std::string& what) {
  throw Error(fmt::format("cuda backend: {}: {}: {}", where, call, what));
}

void check(cublasStatus_t s, const char* where, const char* call, const std::string& context) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::string what = cublasLtGetStatusName(s);
  if (!context.empty()) what += " (" + context + ")";
  throw_error(where, call, what);
}

void check(ncclResult_t s, const char* where, const char* call) {
  if (s == ncclSuccess || s == ncclInProgress) return;
  throw_error(where, call, ncclGetErrorString(s));
}

}  // namespace tptune::cudabe
