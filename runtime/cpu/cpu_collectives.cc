// CpuBackend collectives over MPI-3 non-blocking calls. A group of size 1 (MPI_COMM_NULL) completes at once with a
// local copy, so the tp 1 reference runs without MPI.
#include <fmt/format.h>

#include <climits>
#include <cstring>

#include "plans/error.h"
#include "runtime/cpu/cpu_backend.h"

namespace tptune {
namespace {

class Done final : public Request {
 public:
  void wait() override {}
  bool test() override { return true; }
};

class MpiRequests final : public Request {
 public:
  explicit MpiRequests(std::string what) : what_(std::move(what)) {}
  MPI_Request* add() { return &reqs_.emplace_back(MPI_REQUEST_NULL); }
  void wait() override {
    if (reqs_.empty()) return;
    check(MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE));
    reqs_.clear();
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
    // A request must not be dropped while MPI still writes into the buffers: complete it (errors ignored here).
    if (!reqs_.empty()) MPI_Waitall(static_cast<int>(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }

 private:
  std::string what_;
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

}  // namespace

RequestPtr CpuBackend::all_reduce(Group g, ReduceOp op, const float* in, float* out, int64_t n) {
  MPI_Comm c = comm(g);
  if (c == MPI_COMM_NULL) {
    local_copy(out, in, n);
    return std::make_unique<Done>();
  }
  auto r = std::make_unique<MpiRequests>("all_reduce");
  r->check(
      MPI_Iallreduce(in == out ? MPI_IN_PLACE : in, out, count(n, "all_reduce"), MPI_FLOAT, mpi_op(op), c, r->add()));
  return r;
}

RequestPtr CpuBackend::all_gather(Group g, const float* in, float* out, int64_t n) {
  MPI_Comm c = comm(g);
  if (c == MPI_COMM_NULL) {
    local_copy(out, in, n);
    return std::make_unique<Done>();
  }
  auto r = std::make_unique<MpiRequests>("all_gather");
  int cnt = count(n, "all_gather");
  r->check(MPI_Iallgather(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c, r->add()));
  return r;
}

RequestPtr CpuBackend::reduce_scatter(Group g, ReduceOp op, const float* in, float* out, int64_t n) {
  MPI_Comm c = comm(g);
  if (c == MPI_COMM_NULL) {
    local_copy(out, in, n);
    return std::make_unique<Done>();
  }
  auto r = std::make_unique<MpiRequests>("reduce_scatter");
  r->check(MPI_Ireduce_scatter_block(in, out, count(n, "reduce_scatter"), MPI_FLOAT, mpi_op(op), c, r->add()));
  return r;
}

RequestPtr CpuBackend::all_to_all(Group g, const float* in, float* out, int64_t n) {
  MPI_Comm c = comm(g);
  if (c == MPI_COMM_NULL) {
    local_copy(out, in, n);
    return std::make_unique<Done>();
  }
  auto r = std::make_unique<MpiRequests>("all_to_all");
  int cnt = count(n, "all_to_all");
  r->check(MPI_Ialltoall(in, cnt, MPI_FLOAT, out, cnt, MPI_FLOAT, c, r->add()));
  return r;
}

RequestPtr CpuBackend::send_recv(Group g, const float* send, int dst, float* recv, int src, int64_t n) {
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
  auto r = std::make_unique<MpiRequests>("send_recv");
  int cnt = count(n, "send_recv");
  r->check(MPI_Irecv(recv, cnt, MPI_FLOAT, src, tag, c, r->add()));
  r->check(MPI_Isend(send, cnt, MPI_FLOAT, dst, tag, c, r->add()));
  return r;
}

}  // namespace tptune
