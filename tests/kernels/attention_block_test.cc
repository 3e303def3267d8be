// Blockwise attention (kernels/cpu/attention_block.h): any split of the sequence into query and key blocks, each
// block computed with its mask and the partials merged, equals the full causal attention of attention.h; the
// blocks' backward shares sum to its gradients. Also: the three masks agree with each other where they overlap,
// the merge's empty side, GQA, and the preconditions.
#include "kernels/cpu/attention_block.h"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/attention.h"
#include "tests/kernels/compare.h"

using namespace tptune::kernels;
using tptune::test::check_close;

namespace {

struct Problem {
  AttentionDims dims;
  std::vector<float> q, k, v, dout;
  BlockHeads heads() const { return {dims.batch, dims.n_heads, dims.n_kv_heads, dims.head_dim}; }
};

Problem make_problem(int64_t batch, int64_t seq, int64_t n_heads, int64_t n_kv_heads, int64_t head_dim, uint32_t seed) {
  Problem p;
  p.dims = {batch, seq, n_heads, n_kv_heads, head_dim, true};
  const size_t nq = size_t(batch * seq * n_heads * head_dim), nkv = size_t(batch * seq * n_kv_heads * head_dim);
  // q with std 2 as in attention_test.cc: peaked softmax rows, so a missing or extra key moves o by O(0.1).
  p.q = tptune::test::randn(nq, seed, 2.0);
  p.k = tptune::test::randn(nkv, seed + 1);
  p.v = tptune::test::randn(nkv, seed + 2);
  p.dout = tptune::test::randn(nq, seed + 3);
  return p;
}

struct Full {
  std::vector<float> o, lse, dq, dk, dv;
};

Full full_attention(const Problem& p) {
  const AttentionDims& d = p.dims;
  Full f{std::vector<float>(p.q.size()), std::vector<float>(size_t(d.batch * d.n_heads * d.seq)),
         std::vector<float>(p.q.size()), std::vector<float>(p.k.size()), std::vector<float>(p.v.size())};
  attention(d, p.q.data(), p.k.data(), p.v.data(), f.o.data(), f.lse.data());
  attention_bwd(d, p.q.data(), p.k.data(), p.v.data(), f.o.data(), f.lse.data(), p.dout.data(), f.dq.data(),
                f.dk.data(), f.dv.data());
  return f;
}

// The mask a ring would pick for a (q block, kv block) pair: keys all after the queries are masked out, keys all
// at or before the first query are fully visible, the rest needs the causal position rule.
BlockMask mask_for(SeqRows q, SeqRows kv) {
  if (kv.pos > q.pos + q.len - 1) return BlockMask::masked_out;
  if (kv.pos + kv.len - 1 <= q.pos) return BlockMask::full;
  return BlockMask::causal;
}

std::vector<SeqRows> split(int64_t seq, const std::vector<int64_t>& cuts) {
  std::vector<SeqRows> rows;
  int64_t begin = 0;
  for (int64_t end : cuts) {
    rows.push_back({seq, begin, end - begin, begin});
    begin = end;
  }
  rows.push_back({seq, begin, seq - begin, begin});
  return rows;
}

// Blockwise forward: every q block merges every kv block (in reverse order, to differ from the full kernel's
// order); `pick_mask` false uses the causal position rule for every block, true the ring's choice of mask.
Full blockwise(const Problem& p, const std::vector<SeqRows>& q_blocks, const std::vector<SeqRows>& kv_blocks,
               bool pick_mask) {
  const BlockHeads h = p.heads();
  const auto inf = std::numeric_limits<float>::infinity();
  Full f{std::vector<float>(p.q.size(), 0.0f), std::vector<float>(size_t(h.batch * h.n_heads * p.dims.seq), -inf),
         std::vector<float>(p.q.size(), 0.0f), std::vector<float>(p.k.size(), 0.0f),
         std::vector<float>(p.v.size(), 0.0f)};
  std::vector<float> o_part(p.q.size(), std::nanf("")), lse_part(f.lse.size(), std::nanf(""));
  for (const SeqRows& qb : q_blocks)
    for (auto kb = kv_blocks.rbegin(); kb != kv_blocks.rend(); ++kb) {
      const BlockMask m = pick_mask ? mask_for(qb, *kb) : BlockMask::causal;
      attention_block_fwd(h, m, qb, *kb, p.q.data(), p.k.data(), p.v.data(), o_part.data(), lse_part.data());
      merge_partial(h, qb, f.o.data(), f.lse.data(), o_part.data(), lse_part.data());
    }
  for (const SeqRows& qb : q_blocks)
    for (const SeqRows& kb : kv_blocks)
      attention_block_bwd(h, pick_mask ? mask_for(qb, kb) : BlockMask::causal, qb, kb, p.q.data(), p.k.data(),
                          p.v.data(), f.o.data(), f.lse.data(), p.dout.data(), f.dq.data(), f.dk.data(), f.dv.data());
  return f;
}

// Tolerances: the blockwise and the full kernel compute the same float softmax; they differ in the order of the
// exp sums (relative ~seq * 6e-8) and in the merge's rescaling (a few float roundings per merged block). With 3-5
// blocks per row the worst differences are ~2e-6 (dk), with one key per block (up to 37 merges per row) ~7e-6 (dv)
// (TPTUNE_SHOW_WORST=1), on values of size 1-10. atol 2e-5 + rtol 1e-5 |ref| keeps a margin of 3x in that extreme
// case and 10x otherwise; a missing or doubled key block moves o by O(0.1) (tests/runtime/mpi/cp_verify_test.cc's
// skipped block fails verify).
void check_equal_to_full(const Full& got, const Full& want) {
  check_close("o", got.o, want.o, 2e-5, 1e-5);
  check_close("lse", got.lse, want.lse, 2e-5, 1e-5);
  check_close("dq", got.dq, want.dq, 2e-5, 1e-5);
  check_close("dk", got.dk, want.dk, 2e-5, 1e-5);
  check_close("dv", got.dv, want.dv, 2e-5, 1e-5);
}

}  // namespace

TEST_CASE("attention blocks: any split of q and kv, merged, equals the full causal attention", "[attention]") {
  // seq 37 (odd, not a multiple of 64 or of any block), GQA 4 query heads on 2 kv heads, batch 2.
  const Problem p = make_problem(2, 37, 4, 2, 8, 11);
  const Full want = full_attention(p);
  SECTION("single blocks: the whole sequence is one causal diagonal block") {
    check_equal_to_full(blockwise(p, split(37, {}), split(37, {}), true), want);
  }
  SECTION("uneven kv blocks, one q block, causal rule everywhere") {
    check_equal_to_full(blockwise(p, split(37, {}), split(37, {5, 13, 30}), false), want);
  }
  SECTION("uneven q and kv blocks with the ring's mask choice (full, causal, masked out)") {
    check_equal_to_full(blockwise(p, split(37, {11, 20}), split(37, {5, 13, 30}), true), want);
  }
  SECTION("one key per block: every merge is a single key") {
    std::vector<int64_t> cuts;
    for (int64_t i = 1; i < 37; ++i) cuts.push_back(i);
    check_equal_to_full(blockwise(p, split(37, {18}), split(37, cuts), true), want);
  }
}

TEST_CASE("attention blocks: more than 64 query rows, MHA", "[attention]") {
  // 150 rows cross attention.cc's 64-row matmul blocks (the causal prefix per 64-row block); n_kv_heads == n_heads.
  const Problem p = make_problem(1, 150, 2, 2, 16, 23);
  check_equal_to_full(blockwise(p, split(150, {70}), split(150, {40, 100, 101}), true), full_attention(p));
}

TEST_CASE("attention blocks: masked_out is the causal rule of a later key block, and merges as nothing",
          "[attention]") {
  const Problem p = make_problem(1, 16, 2, 1, 4, 5);
  const BlockHeads h = p.heads();
  const SeqRows q{16, 0, 8, 0}, kv{16, 8, 8, 8};  // keys 8..15 after queries 0..7
  std::vector<float> o_a(p.q.size(), 7.0f), lse_a(size_t(2 * 16), 7.0f), o_b = o_a, lse_b = lse_a;
  attention_block_fwd(h, BlockMask::masked_out, q, kv, p.q.data(), p.k.data(), p.v.data(), o_a.data(), lse_a.data());
  attention_block_fwd(h, BlockMask::causal, q, kv, p.q.data(), p.k.data(), p.v.data(), o_b.data(), lse_b.data());
  CHECK(o_a == o_b);
  CHECK(lse_a == lse_b);
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t i = 0; i < 16; ++i) {
      const float l = lse_a[size_t(head * 16 + i)];
      if (i < 8)
        CHECK(l == -std::numeric_limits<float>::infinity());  // written: no key visible
      else
        CHECK(l == 7.0f);  // rows outside q untouched
    }
  // Merging the empty part into an accumulation leaves it bit-for-bit unchanged; merging a part into an empty
  // accumulation copies it.
  std::vector<float> o_acc = p.q, lse_acc(size_t(2 * 16), 1.5f);
  const std::vector<float> o_before = o_acc, lse_before = lse_acc;
  merge_partial(h, q, o_acc.data(), lse_acc.data(), o_a.data(), lse_a.data());
  CHECK(o_acc == o_before);
  CHECK(lse_acc == lse_before);
  std::vector<float> o_empty(p.q.size(), 0.0f), lse_empty(size_t(2 * 16), -std::numeric_limits<float>::infinity());
  merge_partial(h, q, o_empty.data(), lse_empty.data(), o_acc.data(), lse_acc.data());
  for (int64_t head = 0; head < 2; ++head)
    for (int64_t i = 0; i < 8; ++i) CHECK(lse_empty[size_t(head * 16 + i)] == 1.5f);
  // The backward of a masked-out block adds nothing.
  std::vector<float> dq(p.q.size(), 0.0f), dk(p.k.size(), 0.0f), dv(p.v.size(), 0.0f);
  attention_block_bwd(h, BlockMask::masked_out, q, kv, p.q.data(), p.k.data(), p.v.data(), o_acc.data(), lse_acc.data(),
                      p.dout.data(), dq.data(), dk.data(), dv.data());
  CHECK(dq == std::vector<float>(p.q.size(), 0.0f));
  CHECK(dk == std::vector<float>(p.k.size(), 0.0f));
}

TEST_CASE("attention blocks: merging two halves is the log-sum-exp of both (hand values)", "[attention]") {
  // One row, head_dim 1: part a has lse log 1 = 0 and o 2; part b has lse log 3 and o 6. Together
  // lse = log(1 + 3) = log 4 and o = (1 * 2 + 3 * 6) / 4 = 5.
  const BlockHeads h{1, 1, 1, 1};
  const SeqRows row{1, 0, 1, 0};
  float o = 2.0f, lse = 0.0f;
  const float o_b = 6.0f, lse_b = std::log(3.0f);
  merge_partial(h, row, &o, &lse, &o_b, &lse_b);
  CHECK(o == Approx(5.0f).epsilon(1e-6));
  CHECK(lse == Approx(std::log(4.0f)).epsilon(1e-6));
}

TEST_CASE("attention blocks: preconditions", "[attention]") {
  const BlockHeads h{1, 3, 2, 4};
  std::vector<float> x(64);
  CHECK_THROWS_AS(attention_block_fwd(h, BlockMask::full, {4, 0, 4, 0}, {4, 0, 4, 0}, x.data(), x.data(), x.data(),
                                      x.data(), x.data()),
                  std::invalid_argument);
  const BlockHeads ok{1, 2, 1, 4};
  CHECK_THROWS_AS(attention_block_fwd(ok, BlockMask::full, {4, 2, 3, 0}, {4, 0, 4, 0}, x.data(), x.data(), x.data(),
                                      x.data(), x.data()),
                  std::invalid_argument);
}
