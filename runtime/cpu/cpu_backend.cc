// CpuBackend: memory, Eigen GEMM, timers and the environment record. Kernels are in cpu_kernels.cc, collectives in
// cpu_collectives.cc.
#include "runtime/cpu/cpu_backend.h"

#include <fmt/format.h>

#include <Eigen/Core>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>

#include "plans/util/error.h"

namespace tptune {

CpuBackend::CpuBackend(MPI_Comm tp, MPI_Comm dp, MPI_Comm cp, MPI_Comm pp) {
  comms_.fill(MPI_COMM_NULL);
  slot(Group::tp) = tp, slot(Group::dp) = dp, slot(Group::cp) = cp, slot(Group::pp) = pp;
  Eigen::setNbThreads(1);
}

namespace {
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unknown CPU";
}
}  // namespace

BackendEnvironment CpuBackend::environment() const {
  BackendEnvironment e;
  e.backend = "cpu";
  e.device = cpu_model();
  e.threads = Eigen::nbThreads();
  e.libraries.emplace_back("eigen",
                           fmt::format("{}.{}.{}", EIGEN_WORLD_VERSION, EIGEN_MAJOR_VERSION, EIGEN_MINOR_VERSION));
  if (std::string mpi = mpi_library_version(); !mpi.empty()) e.libraries.emplace_back("mpi", mpi);
  e.libraries.emplace_back("fmt",
                           fmt::format("{}.{}.{}", FMT_VERSION / 10000, FMT_VERSION / 100 % 100, FMT_VERSION % 100));
  return e;
}

int CpuBackend::group_size(Group g) const {
  int n = 1;
  if (comm(g) != MPI_COMM_NULL) MPI_Comm_size(comm(g), &n);
  return n;
}

int CpuBackend::group_rank(Group g) const {
  int r = 0;
  if (comm(g) != MPI_COMM_NULL) MPI_Comm_rank(comm(g), &r);
  return r;
}

Buffer CpuBackend::alloc(int64_t numel, Storage storage) {
  if (numel < 0) throw Error(fmt::format("cpu backend: cannot allocate {} elements", numel));
  // 64-byte aligned for Eigen's vector loads. One element at least, so that an empty tensor still has a valid
  // pointer. (Only f32 and i32 are computed on; other storages can be allocated, and are refused by the calls.)
  size_t bytes = static_cast<size_t>(std::max<int64_t>(numel, 1)) * size_t(storage_bytes(storage));
  bytes = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes);
  if (!p) throw Error(fmt::format("cpu backend: out of memory allocating {} bytes", bytes));
  std::memset(p, 0, bytes);
  return Buffer(std::shared_ptr<void>(p, [](void* q) { std::free(q); }), numel, storage);
}

void CpuBackend::upload(DevPtr dst, const float* host, int64_t n) {
  std::memcpy(dst.f32("cpu backend: upload"), host, size_t(n) * 4);
}
void CpuBackend::upload(int32_t* dst, const int32_t* host, int64_t n) { std::memcpy(dst, host, size_t(n) * 4); }
void CpuBackend::download(float* host, DevPtr src, int64_t n) {
  std::memcpy(host, src.f32("cpu backend: download"), size_t(n) * 4);
}
void CpuBackend::download(int32_t* host, const int32_t* src, int64_t n) { std::memcpy(host, src, size_t(n) * 4); }

void CpuBackend::fill(DevPtr dst, int64_t n, float value) {
  float* d = dst.f32("cpu backend: fill");
  std::fill(d, d + n, value);
}

void CpuBackend::copy2d(DevPtr dst_p, int64_t dst_ld, DevPtr src_p, int64_t src_ld, int64_t rows, int64_t cols) {
  float* dst = dst_p.f32("cpu backend: copy2d");
  const float* src = src_p.f32("cpu backend: copy2d");
  if (rows <= 0 || cols <= 0) return;
  if (dst_ld == cols && src_ld == cols) {
    std::memmove(dst, src, size_t(rows * cols) * 4);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::memmove(dst + r * dst_ld, src + r * src_ld, size_t(cols) * 4);
}

void CpuBackend::convert(DevPtr dst, DevPtr src, int64_t n) {  // fp32 to fp32: a copy
  if (n > 0) std::memmove(dst.f32("cpu backend: convert"), src.f32("cpu backend: convert"), size_t(n) * 4);
}

void CpuBackend::gemm(const GemmArgs& g) {
  using Mat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using CMap = Eigen::Map<const Mat>;
  if (g.m <= 0 || g.n <= 0) return;
  Eigen::Map<Mat> c(g.c.f32("cpu backend: gemm C"), g.m, g.n);
  float alpha = 1.0f;
  if (g.scale_a) alpha *= *g.scale_a;
  if (g.scale_b) alpha *= *g.scale_b;
  if (g.k <= 0) {
    if (!g.accumulate) c.setZero();
    return;
  }
  // Stored shapes: A is (m, k), or (k, m) when trans_a; B is (k, n), or (n, k) when trans_b.
  CMap a(g.a.f32("cpu backend: gemm A"), g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k);
  CMap b(g.b.f32("cpu backend: gemm B"), g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n);
  if (!g.accumulate) c.setZero();
  if (!g.trans_a && !g.trans_b)
    c.noalias() += alpha * (a * b);
  else if (!g.trans_a && g.trans_b)
    c.noalias() += alpha * (a * b.transpose());
  else if (g.trans_a && !g.trans_b)
    c.noalias() += alpha * (a.transpose() * b);
  else
    c.noalias() += alpha * (a.transpose() * b.transpose());
}

namespace {
class CpuTimer final : public Timer {
 public:
  void start() override { t0_ = std::chrono::steady_clock::now(); }
  void stop() override { t1_ = std::chrono::steady_clock::now(); }
  double elapsed_us() override { return std::chrono::duration<double, std::micro>(t1_ - t0_).count(); }

 private:
  std::chrono::steady_clock::time_point t0_, t1_;
};
}  // namespace

std::unique_ptr<Timer> CpuBackend::make_timer() { return std::make_unique<CpuTimer>(); }

}  // namespace tptune
