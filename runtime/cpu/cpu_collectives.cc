// CpuBackend collectives over MPI-3 non-blocking calls. A group of size 1 (MPI_COMM_NULL) completes at once with a
// local copy, so the tp 1 reference runs without MPI.
//
// Watchdog: `wait` polls MPI_Testall (which is also what drives Open MPI's progress) against a deadline instead of
// blocking in MPI_Waitall, so a peer that is stopped or hung (SIGSTOP, a deadlock, a dead link) turns into a
// tptune::Error after `timeout_s` seconds, like PyTorch's NCCL watchdog; the caller names the op and aborts.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>

#include "plans/util/error.h"
#include "runtime/cpu/cpu_backend.h"

namespace tptune {
namespace {

class Done final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

// Set once a wait timed out: the process is about to abort, and requests still in flight must not be waited for
// when the stack unwinds (their peers will never answer).
std::atomic<bool> g_timed_out{false};

class MpiRequests final : public Request {
 public:
  MpiRequests(std::string what, double timeout_s) : what_(std::move(what)), timeout_s_(timeout_s) {}
  MPI_Request* add() { return &reqs_.emplace_back(MPI_REQUEST_NULL); }
  void wait() override {
    if (reqs_.empty()) return;
    if (timeout_s_ <= 0) {
      check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE));
      reqs_.clear();
      return;
    }
    using Clock = std::chrono::steady_clock;
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_);
    while (!test()) {
      if (Clock::now() > deadline) {
        g_timed_out = true;
        throw Error(
            fmt::format("{} did not complete within {} s (tp-run --timeout): a peer rank is stopped, hung "
                        "or slower than the timeout",
                        what_, timeout_s_));
      }
    }
  }
  bool test() override {
    if (reqs_.empty()) return true;
    int flag = 0;
    check(MPI_Testall(static_cast<int>(reqs_.size()), reqs_.data(), &flag, MPI_STATUSES_IGNORE));
    if (flag) reqs_.clear();
    return flag != 0;
  }
  void check(int rc) const {
    if (rc != MPI_SUCCESS) throw Error(fmt::format("MPI {} failed (error code {})", what_, rc));
  }
  ~MpiRequests() override {
    // A request must not be dropped while MPI still writes into the buffers: complete it (errors ignored here),
    // unless a timeout is ending the process.
    if (!reqs_.empty() && !g_timed_out) MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }

 private:
  std::string what_;
  double timeout_s_ = 0;
  std::vector<MPI_Request> reqs_;
};

int count(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX)
    throw Error(fmt::format("MPI {}: {} elements do not fit one MPI call (at most {})", what, n, INT_MAX));
  return static_cast<int>(n);
}

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::sum ? MPI_SUM : MPI_MAX; }

void local_copy(float* out, const float* in, int64_t n) {
  if (out != in && n > 0) std::memmove(out, in, size_t(n) * 4);
}

// MPI moves fp32 here: the CPU stores every floating-point tensor as fp32 (storage_for).
float* f32(DevPtr p, const char* what) { return p.f32(what); }

// The four collectives' common part: fp32 buffers ("cpu backend: WHAT" when one is not), the group's communicator
// (comm_of()); a group of this rank alone completes at once with a local copy, any other issues
// `issue(in, out, count, comm, request)` as one MPI request named `what`.
template <class CommOf, class Issue>
RequestPtr collective(const char* what, double timeout_s, DevPtr in_p, DevPtr out_p, int64_t n, CommOf comm_of,
                      Issue issue) {
  const std::string where = fmt::format("cpu backend: {}", what);
  const float* in = f32(in_p, where.c_str());
  float* out = f32(out_p, where.c_str());
  MPI_Comm c = comm_of();
  if (c == MPI_COMM_NULL) {
    local_copy(out, in, n);
    return std::make_unique<Done>();
  }
  auto r = std::make_unique<MpiRequests>(what, timeout_s);
  const int cnt = count(n, what);
  r->check(issue(in, out, cnt, c, r->add()));
  return r;
}

}  // namespace

RequestPtr CpuBackend::all_reduce(Group g, ReduceOp op, DevPtr in_p, DevPtr out_p, int64_t n) {
  return collective(
      "all_reduce", timeout_s_, in_p, out_p, n, [&] { return comm(g); },
      [&](const float* in, float* out, int cnt, MPI_Comm c, MPI_Request* req) {
        return MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, cnt, MPI_FLOAT, mpi_op(op), c, req);
      });
}

RequestPtr CpuBackend::all_gather(Group g, DevPtr in_p, DevPtr out_p, int64_t n) {
  return collective(
      "all_gather", timeout_s_, in_p, out_p, n, [&] { return comm(g); },
      [](const float* in, float* out, int cnt, MPI_Comm c, MPI_Request* req) {
        return MPI_Iallgather(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c, req);
      });
}

RequestPtr CpuBackend::reduce_scatter(Group g, ReduceOp op, DevPtr in_p, DevPtr out_p, int64_t n) {
  return collective(
      "reduce_scatter", timeout_s_, in_p, out_p, n, [&] { return comm(g); },
      [&](const float* in, float* out, int cnt, MPI_Comm c, MPI_Request* req) {
        return MPI_Ireduce_scatter_block(in, out, cnt, MPI_FLOAT, mpi_op(op), c, req);
      });
}

RequestPtr CpuBackend::all_to_all(Group g, DevPtr in_p, DevPtr out_p, int64_t n) {
  return collective(
      "all_to_all", timeout_s_, in_p, out_p, n, [&] { return comm(g); },
      [](const float* in, float* out, int cnt, MPI_Comm c, MPI_Request* req) {
        return MPI_Ialltoall(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c, req);
      });
}

RequestPtr CpuBackend::send_recv(Group g, DevPtr send_p, int dst, DevPtr recv_p, int src, int64_t n) {
  const float* send = f32(send_p, "cpu backend: send_recv");
  float* recv = f32(recv_p, "cpu backend: send_recv");
  MPI_Comm c = comm(g);
  int size = group_size(g);
  if (dst < 0 || dst >= size || src < 0 || src >= size)
    throw Error(fmt::format("send_recv: peer ranks {} / {} outside a group of {}", dst, src, size));
  if (c == MPI_COMM_NULL) {
    local_copy(recv, send, n);
    return std::make_unique<Done>();
  }
  // Tags follow issue order; every rank issues the same ring steps in the same order, so the k-th send of rank r
  // meets the k-th receive of its neighbour. MPI guarantees tags up to 32767.
  int tag = tag_;
  tag_ = (tag_ + 1) % 32768;
  auto r = std::make_unique<MpiRequests>("send_recv", timeout_s_);
  int cnt = count(n, "send_recv");
  r->check(MPI_Irecv(recv, cnt, MPI_FLOAT, src, tag, c, r->add()));
  r->check(MPI_Isend(send, cnt, MPI_FLOAT, dst, tag, c, r->add()));
  return r;
}

namespace {
// The pipeline's tags sit above the ring steps' (0 .. 32767), so that the two kinds never pair.
constexpr int kP2PTagBase = 32768;
// A group of this process alone (MPI_COMM_NULL) sends to itself on MPI_COMM_SELF.
MPI_Comm p2p_comm(MPI_Comm c) { return c == MPI_COMM_NULL ? MPI_COMM_SELF : c; }
}  // namespace

int CpuBackend::max_p2p_tag() const {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) throw Error("cpu backend: pipeline transfers need MPI (start the ranks with mpirun)");
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  return flag && ub && *ub > kP2PTagBase ? *ub - kP2PTagBase : 0;
}

// One way: MPI_Isend (send) or MPI_Irecv on the group, after the peer and the tag are checked.
RequestPtr CpuBackend::one_way(bool send, Group g, DevPtr data_p, int peer, int64_t n, int tag) {
  const char* what = send ? "send" : "recv";
  float* data = f32(data_p, send ? "cpu backend: send" : "cpu backend: recv");
  const int size = group_size(g);
  if (peer < 0 || peer >= size) throw Error(fmt::format("{}: peer rank {} outside a group of {}", what, peer, size));
  if (tag < 0 || tag > max_p2p_tag())
    throw Error(fmt::format("{}: tag {} outside 0..{} (MPI_TAG_UB)", what, tag, max_p2p_tag()));
  auto r = std::make_unique<MpiRequests>(what, timeout_s_);
  const int cnt = count(n, what);
  MPI_Comm c = p2p_comm(comm(g));
  r->check(send ? MPI_Isend(data, cnt, MPI_FLOAT, peer, kP2PTagBase + tag, c, r->add())
                : MPI_Irecv(data, cnt, MPI_FLOAT, peer, kP2PTagBase + tag, c, r->add()));
  return r;
}

RequestPtr CpuBackend::send(Group g, DevPtr data, int dst, int64_t n, int tag) {
  return one_way(true, g, data, dst, n, tag);
}

RequestPtr CpuBackend::recv(Group g, DevPtr data, int src, int64_t n, int tag) {
  return one_way(false, g, data, src, n, tag);
}

}  // namespace tptune
