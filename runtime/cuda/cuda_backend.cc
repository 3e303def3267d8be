// CudaBackend: device setup, environment, memory and host transfers, GEMM, timers and synchronization. Kernel
// dispatch is in cuda_backend_kernels.cc, collectives in cuda_backend_comm.cc.
#include "runtime/cuda/cuda_backend.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <fmt/format.h>
#include <nccl.h>

#include <vector>

#include "kernels/cuda/attention/attention.h"
#include "kernels/cuda/copy.h"
#include "kernels/cuda/elementwise.h"
#include "plans/util/error.h"
#include "runtime/cuda/copy_plan.h"
#include "runtime/cuda/cublaslt_gemm.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_dispatch.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/nccl_comm.h"

namespace tptune {

using cudabe::check;

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cuda_unavailable_reason() {
  int n = 0;
  const cudaError_t s = cudaGetDeviceCount(&n);
  if (s == cudaSuccess) return n == 0 ? "no GPU visible" : "";
  cudaGetLastError();
  // A machine without a GPU has no NVIDIA driver either: the runtime then answers cudaErrorInsufficientDriver, whose
  // text ("CUDA driver version is insufficient for CUDA runtime version") reads as a broken install. The driver's
  // version is 0 exactly when no driver is loaded (cudaDriverGetVersion).
  int driver = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  cudaGetLastError();
  if (s == cudaErrorNoDevice) return "no GPU visible";
  if (s == cudaErrorInsufficientDriver && driver == 0) return "no GPU visible: no NVIDIA driver is loaded";
  if (s == cudaErrorInsufficientDriver) {
    int runtime = 0;
    cudaRuntimeGetVersion(&runtime);
    return fmt::format(
        "the NVIDIA driver supports CUDA {}.{}, older than this build's CUDA runtime {}.{}: update the "
        "driver",
        driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
  }
  return fmt::format("no usable GPU: cudaGetDeviceCount: {}", cudaGetErrorString(s));
}

CudaBackend::CudaBackend(MPI_Comm tp, MPI_Comm dp, int device) : device_(device) {
  const int n = cuda_device_count();
  if (n == 0) throw Error("cuda backend: " + cuda_unavailable_reason());
  if (device < 0 || device >= n)
    throw Error(fmt::format("cuda backend: device {} (the local rank) but {} device(s) visible: one process per GPU",
                            device, n));
  check(cudaSetDevice(device), "init", "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "init", "cudaStreamCreate(compute)");
  check(cudaStreamCreateWithFlags(&comm_stream_, cudaStreamNonBlocking), "init", "cudaStreamCreate(comm)");
  check(cudaStreamCreateWithFlags(&p2p_stream_, cudaStreamNonBlocking), "init", "cudaStreamCreate(p2p)");
  allocator_ = cudabe::DeviceAllocator::create({compute_, comm_stream_, p2p_stream_});
  gemm_ = std::make_unique<cudabe::CublasLtGemm>(allocator_);
  // Kernel scratch and cuDNN's workspace from the caching allocator (kernels/cuda/device/scratch.h): no cudaMalloc /
  // cudaFree after the first step, and none of the default pool's release at every synchronize.
  scratch_ = [a = allocator_](size_t bytes, const char* what) { return a->allocate(bytes, what); };
  attention_ = std::make_unique<cuda::AttentionPlanCache>(cuda::AttentionImpl::cudnn, scratch_);
  tp_ = std::make_unique<cudabe::NcclComm>(tp, "tp");
  dp_ = std::make_unique<cudabe::NcclComm>(dp, "dp");
  tp_p2p_ = std::make_unique<cudabe::NcclComm>(tp, "tp ring");
}

CudaBackend::~CudaBackend() {
  // Work in flight must end before its buffers and communicators go; errors cannot be thrown from here.
  if (compute_) cudaStreamSynchronize(compute_);
  if (comm_stream_) cudaStreamSynchronize(comm_stream_);
  if (p2p_stream_) cudaStreamSynchronize(p2p_stream_);
  in_flight_.clear();
  tp_.reset();
  dp_.reset();
  tp_p2p_.reset();
  attention_.reset();
  gemm_.reset();
  allocator_.reset();  // cached blocks are freed when the last Buffer lets go of the allocator
  for (cudaStream_t s : {compute_, comm_stream_, p2p_stream_})
    if (s) cudaStreamDestroy(s);
}

namespace {
std::string version3(int v) { return fmt::format("{}.{}", v / 1000, v % 1000 / 10); }
}  // namespace

BackendEnvironment CudaBackend::environment() const {
  BackendEnvironment e;
  e.backend = "cuda";
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device_), "environment", "cudaGetDeviceProperties");
  e.device = prop.name;
  e.threads = 1;
  e.details.emplace_back("sm_count", std::to_string(prop.multiProcessorCount));
  e.details.emplace_back("compute_capability", fmt::format("{}.{}", prop.major, prop.minor));
  e.details.emplace_back("memory_bytes", std::to_string(prop.totalGlobalMem));
  // The simulator's GPU preset (sim/gpus/*.yaml) this device is, for `tp-plan calibrate`.
  const std::string name = prop.name;
  for (const auto& [needle, preset] : {std::pair<const char*, const char*>{"H200", "h200"},
                                       {"H100", "h100-sxm"},
                                       {"B200", "b200"},
                                       {"A100", "a100-sxm-80gb"}})
    if (name.find(needle) != std::string::npos) {
      e.details.emplace_back("device_preset", preset);
      break;
    }
  int driver = 0, runtime = 0;
  check(cudaDriverGetVersion(&driver), "environment", "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&runtime), "environment", "cudaRuntimeGetVersion");
  e.libraries.emplace_back("cuda_driver", version3(driver));
  e.libraries.emplace_back("cuda_runtime", version3(runtime));
  const size_t lt = cublasLtGetVersion();
  e.libraries.emplace_back("cublaslt", fmt::format("{}.{}.{}", lt / 10000, lt / 100 % 100, lt % 100));
  int nccl = 0;
  cudabe::check(ncclGetVersion(&nccl), "environment", "ncclGetVersion");
  e.libraries.emplace_back("nccl", fmt::format("{}.{}.{}", nccl / 10000, nccl / 100 % 100, nccl % 100));
  const int64_t dnn = cuda::cudnn_version();  // cuDNN 9: major*10000 + minor*100 + patch; 0 without cuDNN
  e.libraries.emplace_back("cudnn", dnn > 0 ? fmt::format("{}.{}.{}", dnn / 10000, dnn / 100 % 100, dnn % 100)
                                            : std::string("not built in (bf16 attention unavailable)"));
  if (std::string mpi = mpi_library_version(); !mpi.empty()) e.libraries.emplace_back("mpi", mpi);
  return e;
}

int CudaBackend::group_size(Group g) const { return comm(g).size(); }
int CudaBackend::group_rank(Group g) const { return comm(g).rank(); }
cudabe::NcclComm& CudaBackend::comm(Group g) const { return g == Group::tp ? *tp_ : *dp_; }

Storage CudaBackend::storage_for(DType t) const {
  switch (t) {
    case DType::fp32:
      return Storage::f32;
    case DType::bf16:
      return Storage::bf16;
    case DType::fp8_e4m3:
      return Storage::fp8_e4m3;
    case DType::fp8_e5m2:
      return Storage::fp8_e5m2;
    case DType::fp16:
      break;
  }
  throw Error("cuda backend: fp16 tensors are not run (training.dtype bf16 or fp32)");
}

size_t CudaBackend::device_mallocs() const { return allocator_->cuda_mallocs(); }
size_t CudaBackend::cached_gemm_plans() const { return gemm_->cached_plans(); }

Buffer CudaBackend::alloc(int64_t numel, Storage storage) {
  if (numel < 0) throw Error(fmt::format("cuda backend: cannot allocate {} elements", numel));
  const size_t bytes = size_t(std::max<int64_t>(numel, 1)) * size_t(storage_bytes(storage));
  auto mem = allocator_->allocate(bytes, "alloc");
  check(cudaMemsetAsync(mem.get(), 0, bytes, compute_), "alloc", "cudaMemsetAsync");
  return Buffer(std::move(mem), numel, storage);
}

std::shared_ptr<void> CudaBackend::staging(int64_t n) {
  return allocator_->allocate(size_t(std::max<int64_t>(n, 1)) * 4, "host transfer staging");
}

void CudaBackend::upload(DevPtr dst, const float* host, int64_t n) {
  if (n <= 0) return;
  if (dst.storage == Storage::f32) {
    check(cudaMemcpyAsync(dst.ptr, host, size_t(n) * 4, cudaMemcpyHostToDevice, compute_), "upload", "cudaMemcpyAsync");
  } else {
    auto tmp = staging(n);
    check(cudaMemcpyAsync(tmp.get(), host, size_t(n) * 4, cudaMemcpyHostToDevice, compute_), "upload",
          "cudaMemcpyAsync");
    convert(dst, DevPtr(tmp.get(), Storage::f32), n);
  }
  check(cudaStreamSynchronize(compute_), "upload", "cudaStreamSynchronize");
}

void CudaBackend::upload(int32_t* dst, const int32_t* host, int64_t n) {
  if (n <= 0) return;
  check(cudaMemcpyAsync(dst, host, size_t(n) * 4, cudaMemcpyHostToDevice, compute_), "upload", "cudaMemcpyAsync");
  check(cudaStreamSynchronize(compute_), "upload", "cudaStreamSynchronize");
}

void CudaBackend::download(float* host, DevPtr src, int64_t n) {
  if (n <= 0) return;
  std::shared_ptr<void> tmp;
  const void* from = src.ptr;
  if (src.storage != Storage::f32) {
    tmp = staging(n);
    convert(DevPtr(tmp.get(), Storage::f32), src, n);
    from = tmp.get();
  }
  check(cudaMemcpyAsync(host, from, size_t(n) * 4, cudaMemcpyDeviceToHost, compute_), "download", "cudaMemcpyAsync");
  check(cudaStreamSynchronize(compute_), "download", "cudaStreamSynchronize");
}

void CudaBackend::download(int32_t* host, const int32_t* src, int64_t n) {
  if (n <= 0) return;
  check(cudaMemcpyAsync(host, src, size_t(n) * 4, cudaMemcpyDeviceToHost, compute_), "download", "cudaMemcpyAsync");
  check(cudaStreamSynchronize(compute_), "download", "cudaStreamSynchronize");
}

void CudaBackend::fill(DevPtr dst, int64_t n, float value) {
  if (n <= 0) return;
  if (value == 0.0f) {  // +0 is all-zero bits in every storage
    check(cudaMemsetAsync(dst.ptr, 0, size_t(n) * size_t(storage_bytes(dst.storage)), compute_), "fill",
          "cudaMemsetAsync");
    return;
  }
  switch (dst.storage) {
    case Storage::f32:
      return cuda::fill<float>(compute_, static_cast<float*>(dst.ptr), n, value);
    case Storage::bf16:
      return cuda::fill<__nv_bfloat16>(compute_, static_cast<__nv_bfloat16*>(dst.ptr), n, value);
    case Storage::fp8_e4m3:
    case Storage::fp8_e5m2: {
      auto tmp = staging(n);
      cuda::fill<float>(compute_, static_cast<float*>(tmp.get()), n, value);
      return convert(dst, DevPtr(tmp.get(), Storage::f32), n);
    }
    case Storage::i32:
      break;
  }
  throw Error("cuda backend: fill: int32 tensors are uploaded, not filled");
}

void CudaBackend::copy2d(DevPtr dst, int64_t dst_ld, DevPtr src, int64_t src_ld, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (dst.storage != src.storage)
    throw Error(fmt::format("cuda backend: copy2d from {} into {} storage (convert changes storages)",
                            to_string(src.storage), to_string(dst.storage)));
  const cudabe::CopyPlan p = cudabe::plan_copy2d(dst_ld, src_ld, rows, cols, storage_bytes(dst.storage));
  auto* d = static_cast<char*>(dst.ptr);
  const auto* s = static_cast<const char*>(src.ptr);
  switch (p.kind) {
    case cudabe::CopyPlan::Kind::none:
      return;
    case cudabe::CopyPlan::Kind::contiguous:
      check(cudaMemcpyAsync(d, s, p.bytes, cudaMemcpyDeviceToDevice, compute_), "copy2d", "cudaMemcpyAsync");
      return;
    case cudabe::CopyPlan::Kind::strided:
      check(cudaMemcpy2DAsync(d, p.dst_pitch, s, p.src_pitch, p.bytes, p.rows, cudaMemcpyDeviceToDevice, compute_),
            "copy2d", "cudaMemcpy2DAsync");
      return;
    case cudabe::CopyPlan::Kind::rows:
      for (size_t r = 0; r < p.rows; ++r)
        check(cudaMemcpyAsync(d + r * p.dst_pitch, s + r * p.src_pitch, p.bytes, cudaMemcpyDeviceToDevice, compute_),
              "copy2d", "cudaMemcpyAsync (row)");
      return;
  }
}

void CudaBackend::convert(DevPtr dst, DevPtr src, int64_t n) {
  if (n <= 0) return;
  cudabe::any_storage(src, "convert", [&](auto from) {
    using From = typename decltype(from)::type;
    cudabe::any_storage(dst, "convert", [&](auto to) {
      using To = typename decltype(to)::type;
      cuda::convert<From, To>(compute_, n, static_cast<const From*>(src.ptr), static_cast<To*>(dst.ptr));
    });
  });
}

void CudaBackend::gemm(const GemmArgs& g) { gemm_->run(g, compute_); }

namespace {
class CudaTimer final : public Timer {
 public:
  explicit CudaTimer(cudaStream_t s) : stream_(s) {
    check(cudaEventCreate(&start_), "timer", "cudaEventCreate");
    check(cudaEventCreate(&stop_), "timer", "cudaEventCreate");
  }
  ~CudaTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void start() override { check(cudaEventRecord(start_, stream_), "timer", "cudaEventRecord"); }
  void stop() override { check(cudaEventRecord(stop_, stream_), "timer", "cudaEventRecord"); }
  double elapsed_us() override {
    check(cudaEventSynchronize(stop_), "timer", "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start_, stop_), "timer", "cudaEventElapsedTime");
    return double(ms) * 1000.0;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};
}  // namespace

std::unique_ptr<Timer> CudaBackend::make_timer() { return std::make_unique<CudaTimer>(compute_); }

void CudaBackend::synchronize() {
  poll_in_flight(true);  // the watchdog: collectives that never complete throw here, naming themselves
  check(cudaStreamSynchronize(compute_), "synchronize", "cudaStreamSynchronize(compute)");
  check(cudaStreamSynchronize(comm_stream_), "synchronize", "cudaStreamSynchronize(comm)");
  check(cudaStreamSynchronize(p2p_stream_), "synchronize", "cudaStreamSynchronize(p2p)");
}

}  // namespace tptune
