// Ring attention over MPI (runtime/cpu/ring_attention.h) on MPI_COMM_WORLD as the CP group (run with mpirun -np 2
// and -np 4): every rank shards the same seeded q, k, v, d_o, runs the ring forward and backward, the shards are
// gathered and put back in sequence order, and o, lse, dq, dk, dv are compared with kernels/cpu/attention.h on the
// whole sequence, for both rotate methods, both layouts, GQA and MHA. Planted errors (a ring rotating the other way,
// a skipped block) must fail the same comparison.
#include "runtime/cpu/ring_attention.h"

#include <mpi.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "runtime/cp_layout.h"

using namespace tptune;

namespace {

struct Case {
  int64_t batch, seq, n_heads, n_kv_heads, head_dim;
};

std::vector<float> randn(size_t n, uint32_t seed, double stddev) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = float(dist(gen));
  return v;
}

struct Tensors {
  std::vector<float> o, lse, dq, dk, dv;
};

// Tolerance: the ring computes the same float softmax as the full kernel, in blocks merged with _SDPAMerger's
// formula; the two differ by float rounding in another summation order (worst ~1e-6 of values of size 1-10, as in
// tests/kernels/attention_block_test.cc). A result passes when every |got - want| <= 2e-5 + 1e-5 |want|; the
// returned ratio is the worst |got - want| / (2e-5 + 1e-5 |want|), so <= 1 passes. A missing or misplaced key
// block moves o by O(0.1) (q has std 2: peaked softmax rows), a ratio of thousands.
double worst_ratio(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i])), tol = 2e-5 + 1e-5 * std::fabs(double(want[i]));
    worst = std::isnan(d) ? 1e30 : std::max(worst, d / tol);
  }
  return worst;
}

struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};

// (batch, seq, width) from every rank's (batch, seq / cp, width) shard.
std::vector<float> gather(const World& w, const std::vector<float>& local, int64_t batch, int64_t seq, int64_t width,
                          SeqLayout layout) {
  std::vector<float> all(local.size() * size_t(w.size)), full(size_t(batch * seq * width), std::nanf(""));
  MPI_Allgather(local.data(), int(local.size()), MPI_FLOAT, all.data(), int(local.size()), MPI_FLOAT, MPI_COMM_WORLD);
  for (int r = 0; r < w.size; ++r)
    cp_unshard(std::vector<float>(all.begin() + std::ptrdiff_t(r) * std::ptrdiff_t(local.size()),
                                  all.begin() + std::ptrdiff_t(r + 1) * std::ptrdiff_t(local.size())),
               batch, seq, width, w.size, r, layout, full);
  return full;
}

// lse (batch, heads, s_local) per rank -> (batch, heads, seq): lse's sequence is its last dimension, so each
// (batch, head) row is a width-1 "batch" of the layout.
std::vector<float> gather_lse(const World& w, const std::vector<float>& local, int64_t batch_heads, int64_t seq,
                              SeqLayout layout) {
  return gather(w, local, batch_heads, seq, 1, layout);
}

Tensors reference(const Case& c, const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                  const std::vector<float>& d_o) {
  const kernels::AttentionDims d{c.batch, c.seq, c.n_heads, c.n_kv_heads, c.head_dim, true};
  Tensors t{std::vector<float>(q.size()), std::vector<float>(size_t(c.batch * c.n_heads * c.seq)),
            std::vector<float>(q.size()), std::vector<float>(k.size()), std::vector<float>(v.size())};
  kernels::attention(d, q.data(), k.data(), v.data(), t.o.data(), t.lse.data());
  kernels::attention_bwd(d, q.data(), k.data(), v.data(), t.o.data(), t.lse.data(), d_o.data(), t.dq.data(),
                         t.dk.data(), t.dv.data());
  return t;
}

// The worst tolerance ratio over o, lse, dq, dk, dv of the ring against the unsharded attention (same on every
// rank: the results are gathered everywhere).
double ring_vs_full(const Case& c, const RingOptions& options) {
  World w;
  const int64_t wq = c.n_heads * c.head_dim, wkv = c.n_kv_heads * c.head_dim;
  const auto q = randn(size_t(c.batch * c.seq * wq), 7, 2.0), k = randn(size_t(c.batch * c.seq * wkv), 8, 1.0),
             v = randn(size_t(c.batch * c.seq * wkv), 9, 1.0), d_o = randn(size_t(c.batch * c.seq * wq), 10, 1.0);
  const Tensors want = reference(c, q, k, v, d_o);

  const RingAttentionShape shape{c.batch, cp_local_seq(c.seq, w.size, options.layout), c.n_heads, c.n_kv_heads,
                                 c.head_dim};
  auto shard = [&](const std::vector<float>& t, int64_t width) {
    return cp_shard(t, c.batch, c.seq, width, w.size, w.rank, options.layout);
  };
  const auto ql = shard(q, wq), kl = shard(k, wkv), vl = shard(v, wkv), dol = shard(d_o, wq);
  Tensors l{std::vector<float>(ql.size()), std::vector<float>(size_t(c.batch * c.n_heads * shape.s_local)),
            std::vector<float>(ql.size()), std::vector<float>(kl.size()), std::vector<float>(vl.size())};
  ring_attention_fwd(MPI_COMM_WORLD, shape, options, ql.data(), kl.data(), vl.data(), l.o.data(), l.lse.data());
  ring_attention_bwd(MPI_COMM_WORLD, shape, options, ql.data(), kl.data(), vl.data(), l.o.data(), l.lse.data(),
                     dol.data(), l.dq.data(), l.dk.data(), l.dv.data());

  const double ratios[] = {worst_ratio(gather(w, l.o, c.batch, c.seq, wq, options.layout), want.o),
                           worst_ratio(gather_lse(w, l.lse, c.batch * c.n_heads, c.seq, options.layout), want.lse),
                           worst_ratio(gather(w, l.dq, c.batch, c.seq, wq, options.layout), want.dq),
                           worst_ratio(gather(w, l.dk, c.batch, c.seq, wkv, options.layout), want.dk),
                           worst_ratio(gather(w, l.dv, c.batch, c.seq, wkv, options.layout), want.dv)};
  double worst = 0;
  for (double r : ratios) worst = std::max(worst, r);
  if (w.rank == 0 && std::getenv("TPTUNE_SHOW_WORST"))
    WARN(rotate_method_name(options.rotate)
         << " " << seq_layout_name(options.layout) << " fault " << int(options.fault) << ": worst ratio " << worst);
  return worst;
}

// seq 40 divides by 2 x cp for np 2 and 4 (chunks of 10 and 5 rows); GQA 4 query heads on 2 kv heads.
const Case kGqa{2, 40, 4, 2, 8};
// MHA, one batch, chunks of 18 and 9 rows.
const Case kMha{1, 72, 2, 2, 16};

}  // namespace

TEST_CASE("ring attention equals the unsharded attention: both rotate methods, both layouts", "[mpi][cp]") {
  for (const Case& c : {kGqa, kMha})
    for (RotateMethod rotate : {RotateMethod::allgather, RotateMethod::alltoall})
      for (SeqLayout layout : {SeqLayout::head_tail, SeqLayout::contiguous}) {
        INFO(rotate_method_name(rotate) << ", " << seq_layout_name(layout) << ", heads " << c.n_heads << "/"
                                        << c.n_kv_heads);
        CHECK(ring_vs_full(c, {rotate, layout, RingFault::none}) <= 1.0);
      }
}

TEST_CASE("ring attention: a skipped block fails the comparison", "[mpi][cp]") {
  World w;
  if (w.size < 2) return;  // a ring of one has no step 1
  for (RotateMethod rotate : {RotateMethod::allgather, RotateMethod::alltoall})
    for (SeqLayout layout : {SeqLayout::head_tail, SeqLayout::contiguous}) {
      INFO(rotate_method_name(rotate) << ", " << seq_layout_name(layout));
      CHECK(ring_vs_full(kGqa, {rotate, layout, RingFault::skip_block}) > 100.0);
    }
}

TEST_CASE("ring attention: a ring rotating the other way fails the comparison (np > 2)", "[mpi][cp]") {
  World w;
  for (RotateMethod rotate : {RotateMethod::allgather, RotateMethod::alltoall})
    for (SeqLayout layout : {SeqLayout::head_tail, SeqLayout::contiguous}) {
      INFO(rotate_method_name(rotate) << ", " << seq_layout_name(layout) << ", np " << w.size);
      const double ratio = ring_vs_full(kGqa, {rotate, layout, RingFault::reverse_ring});
      if (w.size > 2)
        CHECK(ratio > 100.0);
      else  // on a ring of 2 (or 1) rank + 1 is rank - 1: both directions are the same ring, and must pass
        CHECK(ratio <= 1.0);
    }
}

TEST_CASE("ring attention: shapes it cannot run are one-line errors", "[mpi][cp]") {
  std::vector<float> x(4096);
  float* p = x.data();
  const RingOptions head_tail{RotateMethod::allgather, SeqLayout::head_tail, RingFault::none};
  CHECK_THROWS_WITH(ring_attention_fwd(MPI_COMM_WORLD, {1, 5, 2, 1, 4}, head_tail, p, p, p, p, p),
                    "ring attention: head_tail layout needs an even local sequence, got 5");
  CHECK_THROWS_WITH(ring_attention_fwd(MPI_COMM_WORLD, {1, 4, 3, 2, 4}, head_tail, p, p, p, p, p),
                    "ring attention: batch 1, local sequence 4, 3 heads on 2 kv heads of 4: expected positive sizes "
                    "and n_heads a multiple of n_kv_heads");
  CHECK_THROWS_WITH(ring_attention_bwd(MPI_COMM_NULL, {1, 4, 2, 1, 4}, head_tail, p, p, p, p, p, p, p, p, p),
                    "ring attention: no CP communicator (MPI_COMM_NULL)");
}
