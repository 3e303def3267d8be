// Ring attention over MPI; see ring_attention.h.
#include "runtime/cpu/ring_attention.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_block.h"
#include "plans/checked_math.h"
#include "plans/error.h"
#include "runtime/ring_schedule.h"

namespace tptune {

std::string_view rotate_method_name(RotateMethod method) {
  return method == RotateMethod::alltoall ? "alltoall" : "allgather";
}

namespace {

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) throw Error(fmt::format("ring attention: MPI {} failed (error code {})", what, rc));
}

int mpi_count(size_t n) {
  if (n > size_t(INT_MAX)) throw Error(fmt::format("ring attention: {} values do not fit one MPI call", n));
  return int(n);
}

// Outstanding requests of one exchange; wait() completes them all (and the destructor, so that an exception never
// leaves MPI writing into freed buffers).
class Pending {
 public:
  MPI_Request* add() { return &reqs_.emplace_back(MPI_REQUEST_NULL); }
  void wait() {
    if (reqs_.empty()) return;
    check_mpi(MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE), "wait");
    reqs_.clear();
  }
  ~Pending() {
    if (!reqs_.empty()) MPI_Waitall(int(reqs_.size()), reqs_.data(), MPI_STATUSES_IGNORE);
  }

 private:
  std::vector<MPI_Request> reqs_;
};

struct Ring {
  MPI_Comm comm;
  int rank = 0, size = 1;
  RingOptions options;
  // The ring's direction: k/v (and dk/dv) go to `next` and come from `prev`; a reversed ring is the planted error.
  int next() const { return options.fault == RingFault::reverse_ring ? (rank + size - 1) % size : (rank + 1) % size; }
  int prev() const { return options.fault == RingFault::reverse_ring ? (rank + 1) % size : (rank + size - 1) % size; }
  // The slot of the all-gathered buffer read at step i (rank - i, or rank + i on a reversed ring).
  int gathered_slot(int step) const {
    return options.fault == RingFault::reverse_ring ? (rank + step) % size : ((rank - step) % size + size) % size;
  }
  bool skipped_by_fault(int step) const { return options.fault == RingFault::skip_block && step == 1; }
};

Ring make_ring(MPI_Comm comm, const RingAttentionShape& s, const RingOptions& options) {
  if (comm == MPI_COMM_NULL) throw Error("ring attention: no CP communicator (MPI_COMM_NULL)");
  if (s.batch <= 0 || s.s_local <= 0 || s.n_heads <= 0 || s.n_kv_heads <= 0 || s.head_dim <= 0 ||
      s.n_heads % s.n_kv_heads != 0)
    throw Error(
        fmt::format("ring attention: batch {}, local sequence {}, {} heads on {} kv heads of {}: expected "
                    "positive sizes and n_heads a multiple of n_kv_heads",
                    s.batch, s.s_local, s.n_heads, s.n_kv_heads, s.head_dim));
  if (options.layout == SeqLayout::head_tail && s.s_local % 2 != 0)
    throw Error(fmt::format("ring attention: head_tail layout needs an even local sequence, got {}", s.s_local));
  Ring r{comm, 0, 1, options};
  check_mpi(MPI_Comm_rank(comm, &r.rank), "Comm_rank");
  check_mpi(MPI_Comm_size(comm, &r.size), "Comm_size");
  return r;
}

// Tags: k/v of step i, dk/dv of step i.
int kv_tag(int step) { return 2 * step; }
int dkv_tag(int step) { return 2 * step + 1; }

// The k/v shard held at each step: the rank's own at step 0, then one rotation per step.
class KvRotation {
 public:
  KvRotation(const Ring& ring, size_t kv_elems, const float* k, const float* v)
      : ring_(ring), kv_elems_(kv_elems), cur_(2 * kv_elems) {
    std::memcpy(cur_.data(), k, kv_elems * sizeof(float));  // torch.cat([key.flatten(), value.flatten()])
    std::memcpy(cur_.data() + kv_elems, v, kv_elems * sizeof(float));
    if (ring_.size == 1) return;
    if (ring_.options.rotate == RotateMethod::allgather) {
      gathered_.resize(size_t(ring_.size) * 2 * kv_elems);
      const int n = mpi_count(2 * kv_elems);
      check_mpi(MPI_Iallgather(cur_.data(), n, MPI_FLOAT, gathered_.data(), n, MPI_FLOAT, ring_.comm, pending_.add()),
                "Iallgather");
    } else {
      next_.resize(2 * kv_elems);
    }
  }
  // Called at the start of step `step` (> 0): waits for that step's shard.
  void advance(int step) {
    pending_.wait();
    if (ring_.options.rotate == RotateMethod::allgather) {
      held_ = gathered_.data() + size_t(ring_.gathered_slot(step)) * 2 * kv_elems_;
    } else {
      std::swap(cur_, next_);
      held_ = cur_.data();
    }
  }
  // Called after advance() at a step that is not the last: starts moving the held shard along the ring.
  void send_on(int step) {
    if (ring_.options.rotate == RotateMethod::allgather) return;  // gathered once
    const int n = mpi_count(2 * kv_elems_);
    check_mpi(MPI_Irecv(next_.data(), n, MPI_FLOAT, ring_.prev(), kv_tag(step), ring_.comm, pending_.add()), "Irecv");
    check_mpi(MPI_Isend(cur_.data(), n, MPI_FLOAT, ring_.next(), kv_tag(step), ring_.comm, pending_.add()), "Isend");
  }
  const float* k() const { return held_ ? held_ : cur_.data(); }
  const float* v() const { return k() + kv_elems_; }

 private:
  const Ring& ring_;
  size_t kv_elems_;
  std::vector<float> cur_, next_, gathered_;
  const float* held_ = nullptr;
  Pending pending_;
};

kernels::BlockHeads heads(const RingAttentionShape& s) { return {s.batch, s.n_heads, s.n_kv_heads, s.head_dim}; }

// Element counts of the local tensors, overflow-checked (plans/checked_math.h).
struct Sizes {
  size_t q, kv, lse;
  explicit Sizes(const RingAttentionShape& s)
      : q(size_t(checked_mul({s.batch, s.s_local, s.n_heads, s.head_dim}, "ring attention: elements of q"))),
        kv(size_t(checked_mul({s.batch, s.s_local, s.n_kv_heads, s.head_dim}, "ring attention: elements of k"))),
        lse(size_t(checked_mul({s.batch, s.n_heads, s.s_local}, "ring attention: elements of lse"))) {}
};

kernels::SeqRows rows(int64_t s_local, int64_t begin, int64_t len) {
  // The causal mask is only used on the local diagonal (step 0), where local row order is global order.
  return {s_local, begin, len, begin};
}

}  // namespace

void ring_attention_fwd(MPI_Comm comm, const RingAttentionShape& s, const RingOptions& options, const float* q,
                        const float* k, const float* v, float* o, float* lse) {
  const Ring ring = make_ring(comm, s, options);
  const kernels::BlockHeads h = heads(s);
  const Sizes n(s);
  const size_t q_elems = n.q, kv_elems = n.kv, lse_elems = n.lse;
  std::fill(o, o + q_elems, 0.0f);  // the empty accumulation: o = 0, lse = -inf
  std::fill(lse, lse + lse_elems, -std::numeric_limits<float>::infinity());
  std::vector<float> o_part(q_elems), lse_part(lse_elems);
  KvRotation kv(ring, kv_elems, k, v);
  for (int i = 0; i < ring.size; ++i) {
    if (i > 0) kv.advance(i);
    if (i < ring.size - 1) kv.send_on(i);
    const RingStep step = ring_step(ring.rank, ring.size, i, options.layout, s.s_local);
    if (step.skip || ring.skipped_by_fault(i)) continue;
    const kernels::SeqRows qr = rows(s.s_local, step.q_begin, step.q_len);
    kernels::attention_block_fwd(h, step.mask, qr, rows(s.s_local, step.kv_begin, step.kv_len), q, kv.k(), kv.v(),
                                 o_part.data(), lse_part.data());
    kernels::merge_partial(h, qr, o, lse, o_part.data(), lse_part.data());
  }
}

void ring_attention_bwd(MPI_Comm comm, const RingAttentionShape& s, const RingOptions& options, const float* q,
                        const float* k, const float* v, const float* o, const float* lse, const float* d_o, float* dq,
                        float* dk, float* dv) {
  const Ring ring = make_ring(comm, s, options);
  const kernels::BlockHeads h = heads(s);
  const Sizes sizes(s);
  const size_t q_elems = sizes.q, kv_elems = sizes.kv;
  std::fill(dq, dq + q_elems, 0.0f);
  // part: this step's dk/dv share of the held shard; outgoing: the shard's accumulated dk/dv sent on;
  // incoming: the accumulator of the next held shard, from the previous rank.
  std::vector<float> part(2 * kv_elems), outgoing(2 * kv_elems), incoming(2 * kv_elems);
  const int n = mpi_count(2 * kv_elems);
  Pending dkv;
  KvRotation kv(ring, kv_elems, k, v);
  for (int i = 0; i < ring.size; ++i) {
    if (i > 0) kv.advance(i);
    if (i < ring.size - 1) kv.send_on(i);
    const RingStep step = ring_step(ring.rank, ring.size, i, options.layout, s.s_local);
    std::fill(part.begin(), part.end(), 0.0f);
    if (!step.skip && !ring.skipped_by_fault(i))
      kernels::attention_block_bwd(h, step.mask, rows(s.s_local, step.q_begin, step.q_len),
                                   rows(s.s_local, step.kv_begin, step.kv_len), q, kv.k(), kv.v(), o, lse, d_o, dq,
                                   part.data(), part.data() + kv_elems);
    if (i == 0) {
      outgoing = part;
    } else {
      dkv.wait();  // incoming holds the held shard's gradient so far; the last send of outgoing is done
      for (size_t j = 0; j < outgoing.size(); ++j) outgoing[j] = incoming[j] + part[j];
    }
    if (ring.size == 1) break;
    check_mpi(MPI_Irecv(incoming.data(), n, MPI_FLOAT, ring.prev(), dkv_tag(i), comm, dkv.add()), "Irecv");
    check_mpi(MPI_Isend(outgoing.data(), n, MPI_FLOAT, ring.next(), dkv_tag(i), comm, dkv.add()), "Isend");
  }
  dkv.wait();
  // After cp sends the accumulator of this rank's own shard is back (for cp 1: the only step's share).
  const std::vector<float>& own = ring.size == 1 ? outgoing : incoming;
  std::memcpy(dk, own.data(), kv_elems * sizeof(float));
  std::memcpy(dv, own.data() + kv_elems, kv_elems * sizeof(float));
}

}  // namespace tptune
