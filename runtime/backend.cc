// Storage names and sizes, the checked fp32 view of a DevPtr, the MPI library version (runtime/backend.h).
#include "runtime/backend.h"

#include <fmt/format.h>
#include <mpi.h>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

// Storage's enumerators, in declaration order: their names and their bytes per element.
constexpr std::string_view kStorageNames[] = {"f32", "bf16", "fp8_e4m3", "fp8_e5m2", "i32"};
constexpr int kStorageBytes[] = {4, 2, 1, 1, 4};
static_assert(std::size(kStorageNames) == enum_count(Storage::i32) &&
              std::size(kStorageBytes) == enum_count(Storage::i32));

int storage_bytes(Storage s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kStorageBytes) ? kStorageBytes[i] : 4;
}

std::string_view to_string(Storage s) { return name_of(kStorageNames, s); }

float* DevPtr::f32(const char* what) const {
  if (storage != Storage::f32)
    throw Error(fmt::format("{}: expected an f32 tensor, got {} storage", what, to_string(storage)));
  return static_cast<float*>(ptr);
}

std::string mpi_library_version() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return "";
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, static_cast<size_t>(len));
  if (auto comma = v.find(','); comma != std::string::npos) v.resize(comma);  // "Open MPI v4.1.4, package: ..."
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v;
}

// The fused ops' defaults: the eager ops they replace, in their order (see backend.h).
void Backend::add_rmsnorm_fwd(int64_t rows, int64_t dim, double eps, DevPtr a, DevPtr b, DevPtr w, DevPtr h, DevPtr y,
                              float* rstd) {
  add(rows * dim, a, b, h);
  rmsnorm_fwd(rows, dim, eps, h, w, y, rstd);
}
void Backend::rmsnorm_bwd_add(int64_t rows, int64_t dim, DevPtr x, DevPtr w, const float* rstd, DevPtr dy, DevPtr dres,
                              DevPtr dx, DevPtr dw) {
  const Buffer part = alloc(rows * dim, dx.storage);
  rmsnorm_bwd(rows, dim, x, w, rstd, dy, part.ptr(), dw);
  add(rows * dim, dres, part.ptr(), dx);
}
void Backend::rope_qk_fwd(const RopeShape& qs, const RopeShape& ks, DevPtr q, DevPtr k, DevPtr qo, DevPtr ko) {
  rope_fwd(qs, q, qo);
  rope_fwd(ks, k, ko);
}
void Backend::rope_qk_bwd(const RopeShape& qs, const RopeShape& ks, DevPtr dq, DevPtr dk, DevPtr dqo, DevPtr dko) {
  rope_bwd(qs, dq, dqo);
  rope_bwd(ks, dk, dko);
}

void Backend::adamw_multi(const std::vector<AdamWTensorRef>& tensors, const AdamWParams& h) {
  for (const AdamWTensorRef& t : tensors) adamw(t.n, h, t.p, t.g, t.m, t.v);
}

}  // namespace tptune
