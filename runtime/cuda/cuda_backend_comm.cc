// CudaBackend collectives: NCCL on the communication stream (send_recv ring steps on their own stream), ordered
// after the compute issued before them and waited for by the compute stream through events (cuda_backend.h).
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <thread>

#include "plans/util/error.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/nccl_comm.h"

namespace tptune {

namespace cudabe {
// A collective in flight: its completion event, what it is, when it was issued.
struct InFlight {
  cudaEvent_t done = nullptr;
  std::string what;
  std::chrono::steady_clock::time_point issued;
  ~InFlight() {
    if (done) cudaEventDestroy(done);
  }
  bool complete() const {
    cudaError_t s = cudaEventQuery(done);
    if (s == cudaErrorNotReady) return false;
    check(s, what.c_str(), "cudaEventQuery");
    return true;
  }
};
}  // namespace cudabe

using cudabe::check;

namespace {

class CudaRequest final : public Request {
 public:
  CudaRequest(std::shared_ptr<cudabe::InFlight> f, cudaStream_t compute) : f_(std::move(f)), compute_(compute) {}
  // The compute stream waits for the collective on the device; the host goes on issuing work. The watchdog is in
  // CudaBackend::synchronize, which every step ends with.
  void wait() override {
    if (waited_) return;
    check(cudaStreamWaitEvent(compute_, f_->done, 0), f_->what.c_str(), "cudaStreamWaitEvent");
    waited_ = true;
  }
  bool test() override { return f_->complete(); }

 private:
  std::shared_ptr<cudabe::InFlight> f_;
  cudaStream_t compute_;
  bool waited_ = false;
};

ncclDataType_t nccl_type(Storage s, bool reduces, const std::string& what) {
  switch (s) {
    case Storage::f32:
      return ncclFloat32;
    case Storage::bf16:
      return ncclBfloat16;
    case Storage::i32:
      return ncclInt32;
    case Storage::fp8_e4m3:
    case Storage::fp8_e5m2:
      if (!reduces) return ncclUint8;  // moved, not summed: the bytes are enough
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
      return s == Storage::fp8_e4m3 ? ncclFloat8e4m3 : ncclFloat8e5m2;
#else
      break;
#endif
  }
  throw Error(fmt::format("cuda backend: {}: NCCL cannot reduce {} (NCCL >= 2.24 reduces float8)", what, to_string(s)));
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::sum ? ncclSum : ncclMax; }

void same_storage(DevPtr in, DevPtr out, const std::string& what) {
  if (in.storage != out.storage)
    throw Error(fmt::format("cuda backend: {}: input {} and output {} storage", what, to_string(in.storage),
                            to_string(out.storage)));
}

}  // namespace

template <class Issue>
RequestPtr CudaBackend::on_stream(cudaStream_t stream, std::string what, Issue&& issue) {
  auto f = std::make_shared<cudabe::InFlight>();
  f->what = std::move(what);
  f->issued = std::chrono::steady_clock::now();
  cudaEvent_t ready = nullptr;
  check(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), f->what.c_str(), "cudaEventCreate");
  check(cudaEventRecord(ready, compute_), f->what.c_str(), "cudaEventRecord");
  check(cudaStreamWaitEvent(stream, ready, 0), f->what.c_str(), "cudaStreamWaitEvent");
  cudaEventDestroy(ready);  // released once recorded work completes
  issue(stream);
  check(cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming), f->what.c_str(), "cudaEventCreate");
  check(cudaEventRecord(f->done, stream), f->what.c_str(), "cudaEventRecord");
  in_flight_.push_back(f);
  return std::make_unique<CudaRequest>(std::move(f), compute_);
}

void CudaBackend::poll_in_flight(bool block) {
  using Clock = std::chrono::steady_clock;
  while (!in_flight_.empty()) {
    cudabe::InFlight& f = *in_flight_.front();
    if (f.complete()) {
      in_flight_.pop_front();
      continue;
    }
    if (!block) return;
    if (timeout_s_ > 0 && Clock::now() - f.issued > std::chrono::duration<double>(timeout_s_)) {
      const std::string what = f.what;
      tp_->abort();
      dp_->abort();
      tp_p2p_->abort();
      throw Error(
          fmt::format("{} did not complete within {} s (tp-run --timeout): a peer rank is stopped, hung or "
                      "slower than the timeout",
                      what, timeout_s_));
    }
    if (timeout_s_ <= 0)  // no watchdog: block on the event
      check(cudaEventSynchronize(f.done), f.what.c_str(), "cudaEventSynchronize");
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

template <class Call>
RequestPtr CudaBackend::nccl_collective(cudabe::NcclComm& c, cudaStream_t stream, DevPtr in, DevPtr out, int64_t n,
                                        bool reduces, const std::string& what, Call&& call) {
  same_storage(in, out, what);
  if (!c.get()) {
    copy2d(out, n, in, n, in.ptr == out.ptr ? 0 : 1, n);
    return on_stream(stream, what, [](cudaStream_t) {});
  }
  const ncclDataType_t t = nccl_type(in.storage, reduces, what);
  return on_stream(stream, what, [&](cudaStream_t s) { call(c.get(), t, s); });
}

namespace {
std::string collective_text(std::string_view name, Group g, int64_t n, DevPtr in) {
  return fmt::format("{} ({}, {} x {})", name, to_string(g), n, to_string(in.storage));
}
}  // namespace

template <class Call>
RequestPtr CudaBackend::group_collective(const char* name, Group g, DevPtr in, DevPtr out, int64_t n, bool reduces,
                                         Call&& call) {
  const std::string what = collective_text(name, g, n, in);
  return nccl_collective(comm(g), comm_stream_, in, out, n, reduces, what,
                         [&](ncclComm_t c, ncclDataType_t t, cudaStream_t s) { call(c, t, s, what.c_str()); });
}

RequestPtr CudaBackend::all_reduce(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) {
  return group_collective("all_reduce", g, in, out, n, true, [&](ncclComm_t c, ncclDataType_t t, auto s, auto what) {
    check(ncclAllReduce(in.ptr, out.ptr, size_t(n), t, nccl_op(op), c, s), what, "ncclAllReduce");
  });
}

RequestPtr CudaBackend::all_gather(Group g, DevPtr in, DevPtr out, int64_t n) {
  return group_collective("all_gather", g, in, out, n, false, [&](ncclComm_t c, ncclDataType_t t, auto s, auto what) {
    check(ncclAllGather(in.ptr, out.ptr, size_t(n), t, c, s), what, "ncclAllGather");
  });
}

RequestPtr CudaBackend::reduce_scatter(Group g, ReduceOp op, DevPtr in, DevPtr out, int64_t n) {
  return group_collective(
      "reduce_scatter", g, in, out, n, true, [&](ncclComm_t c, ncclDataType_t t, auto s, auto what) {
        check(ncclReduceScatter(in.ptr, out.ptr, size_t(n), t, nccl_op(op), c, s), what, "ncclReduceScatter");
      });
}

RequestPtr CudaBackend::all_to_all(Group g, DevPtr in, DevPtr out, int64_t n) {
  const int ranks = comm(g).size();
  return group_collective("all_to_all", g, in, out, n, false, [&](ncclComm_t c, ncclDataType_t t, auto s, auto what) {
    check(ncclGroupStart(), what, "ncclGroupStart");
    for (int peer = 0; peer < ranks; ++peer) {
      check(ncclSend(in.at(peer * n).ptr, size_t(n), t, peer, c, s), what, "ncclSend");
      check(ncclRecv(out.at(peer * n).ptr, size_t(n), t, peer, c, s), what, "ncclRecv");
    }
    check(ncclGroupEnd(), what, "ncclGroupEnd");
  });
}

RequestPtr CudaBackend::send_recv(Group g, DevPtr send, int dst, DevPtr recv, int src, int64_t n) {
  const std::string what =
      fmt::format("send_recv ({}, {} x {}, to {} from {})", to_string(g), n, to_string(send.storage), dst, src);
  cudabe::NcclComm& ring = g == Group::tp ? *tp_p2p_ : *dp_;
  if (dst < 0 || dst >= ring.size() || src < 0 || src >= ring.size())
    throw Error(fmt::format("send_recv: peer ranks {} / {} outside a group of {}", dst, src, ring.size()));
  // Each communicator on one stream only (cuda_backend.h): the tp ring's own communicator on the p2p stream, so
  // that the next slot travels while the compute stream multiplies this one; the dp communicator on the stream of
  // the dp collectives, which it shares.
  cudaStream_t stream = g == Group::tp ? p2p_stream_ : comm_stream_;
  return nccl_collective(ring, stream, send, recv, n, false, what, [&](ncclComm_t c, ncclDataType_t t, auto s) {
    check(ncclGroupStart(), what.c_str(), "ncclGroupStart");
    check(ncclSend(send.ptr, size_t(n), t, dst, c, s), what.c_str(), "ncclSend");
    check(ncclRecv(recv.ptr, size_t(n), t, src, c, s), what.c_str(), "ncclRecv");
    check(ncclGroupEnd(), what.c_str(), "ncclGroupEnd");
  });
}

RequestPtr CudaBackend::send(Group g, DevPtr, int, int64_t, int) {
  throw Error(
      fmt::format("cuda backend: no one-way send on the {} group (pipeline-parallel plans run on the CPU "
                  "backend)",
                  to_string(g)));
}

RequestPtr CudaBackend::recv(Group g, DevPtr, int, int64_t, int) {
  throw Error(
      fmt::format("cuda backend: no one-way receive on the {} group (pipeline-parallel plans run on the CPU "
                  "backend)",
                  to_string(g)));
}

}  // namespace tptune
