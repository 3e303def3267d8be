// The context-parallel layouts (runtime/ring/cp_layout.h) and the ring attention schedule (runtime/ring/schedule.h),
// without MPI: hand-derived positions, shard/unshard round trips, the layouts' one-line errors, and the schedule's
// exactness property: over all ranks and steps, every causal (query, key) pair is computed exactly once and no
// masked pair is computed, for cp 1-8 in both layouts; under head_tail every rank does the same work; and each block
// equals the one torch's ring attention computed (recorded by tests/runtime/check_ring_schedule.py).
#include <catch2/catch.hpp>
#include <fstream>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "plans/util/error.h"
#include "runtime/ring/cp_layout.h"
#include "runtime/ring/schedule.h"

using namespace tptune;

TEST_CASE("cp layouts: positions by hand", "[cp]") {
  // seq 8, cp 2. contiguous: rank 0 rows 0-3, rank 1 rows 4-7. head_tail: 2cp = 4 chunks of 2; rank 0 holds chunks
  // 0 and 3 (0,1,6,7), rank 1 chunks 1 and 2 (2,3,4,5).
  CHECK(cp_positions(8, 2, 0, SeqLayout::contiguous) == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(cp_positions(8, 2, 1, SeqLayout::contiguous) == std::vector<int64_t>{4, 5, 6, 7});
  CHECK(cp_positions(8, 2, 0, SeqLayout::head_tail) == std::vector<int64_t>{0, 1, 6, 7});
  CHECK(cp_positions(8, 2, 1, SeqLayout::head_tail) == std::vector<int64_t>{2, 3, 4, 5});
  // seq 8, cp 4, head_tail: 8 chunks of 1; rank r holds r and 7 - r.
  CHECK(cp_positions(8, 4, 2, SeqLayout::head_tail) == std::vector<int64_t>{2, 5});
  CHECK(cp_positions(8, 1, 0, SeqLayout::head_tail) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("cp layouts: shards of all ranks unshard to the full tensor", "[cp]") {
  for (SeqLayout layout : {SeqLayout::contiguous, SeqLayout::head_tail})
    for (int cp : {1, 2, 3, 4}) {
      const int64_t batch = 2, seq = 24, width = 3;
      std::vector<float> full(size_t(batch * seq * width)), back(full.size(), -1.0f);
      std::iota(full.begin(), full.end(), 0.0f);
      for (int r = 0; r < cp; ++r) {
        const std::vector<float> shard = cp_shard(full, batch, seq, width, cp, r, layout);
        REQUIRE(shard.size() == size_t(batch * (seq / cp) * width));
        // Row i of batch b of the shard is row cp_positions()[i] of the full tensor.
        const auto pos = cp_positions(seq, cp, r, layout);
        CHECK(shard[size_t(((1 * (seq / cp)) + 1) * width)] == full[size_t((1 * seq + pos[1]) * width)]);
        cp_unshard(shard, batch, seq, width, cp, r, layout, back);
      }
      CHECK(back == full);
    }
}

TEST_CASE("cp layouts: a sequence that does not divide is a one-line error", "[cp][bad-input]") {
  CHECK_THROWS_WITH(cp_local_seq(12, 4, SeqLayout::head_tail),
                    "context parallel: sequence length 12 is not divisible by 8 (head_tail layout, cp 4)");
  CHECK_THROWS_WITH(cp_local_seq(10, 4, SeqLayout::contiguous),
                    "context parallel: sequence length 10 is not divisible by 4 (contiguous layout, cp 4)");
  CHECK(cp_local_seq(12, 4, SeqLayout::contiguous) == 3);
  CHECK_THROWS_AS(cp_positions(8, 2, 2, SeqLayout::contiguous), Error);
  std::vector<float> wrong(5);
  CHECK_THROWS_AS(cp_shard(wrong, 1, 8, 1, 2, 0, SeqLayout::contiguous), Error);
}

TEST_CASE("ring schedule: torch's steps by hand (cp 2, head_tail)", "[cp]") {
  // Rank 0 at step 1 holds rank 1's shard (source 1 > rank 0): only its tail q chunk sees it, fully.
  RingStep s = ring_step(0, 2, 1, SeqLayout::head_tail, 6);
  CHECK(s.source == 1);
  CHECK_FALSE(s.skip);
  CHECK(s.mask == kernels::BlockMask::full);
  CHECK((s.q_begin == 3 && s.q_len == 3 && s.kv_begin == 0 && s.kv_len == 6));
  // Rank 1 at step 1 holds rank 0's shard: all its q rows see rank 0's head chunk only.
  s = ring_step(1, 2, 1, SeqLayout::head_tail, 6);
  CHECK(s.source == 0);
  CHECK((s.q_begin == 0 && s.q_len == 6 && s.kv_begin == 0 && s.kv_len == 3));
  // Step 0: causal on the local diagonal.
  CHECK(ring_step(1, 2, 0, SeqLayout::head_tail, 6).mask == kernels::BlockMask::causal);
  // Contiguous: rank 0 skips the later shard, rank 1 sees all of the earlier one.
  CHECK(ring_step(0, 2, 1, SeqLayout::contiguous, 6).skip);
  CHECK_FALSE(ring_step(1, 2, 1, SeqLayout::contiguous, 6).skip);
  CHECK_THROWS_AS(ring_step(0, 2, 2, SeqLayout::contiguous, 6), Error);
  CHECK_THROWS_AS(ring_step(0, 2, 1, SeqLayout::head_tail, 5), Error);
}

TEST_CASE("ring schedule: every causal pair exactly once, no masked pair, for cp 1-8", "[cp]") {
  for (SeqLayout layout : {SeqLayout::contiguous, SeqLayout::head_tail})
    for (int cp = 1; cp <= 8; ++cp) {
      const int64_t seq = 2 * cp * 3, s_local = seq / cp;
      std::vector<int> count(size_t(seq * seq), 0);
      std::vector<int64_t> work(size_t(cp), 0);
      for (int r = 0; r < cp; ++r) {
        const auto q_pos = cp_positions(seq, cp, r, layout);
        for (int i = 0; i < cp; ++i) {
          const RingStep s = ring_step(r, cp, i, layout, s_local);
          if (s.skip) continue;
          const auto kv_pos = cp_positions(seq, cp, s.source, layout);
          for (int64_t a = s.q_begin; a < s.q_begin + s.q_len; ++a)
            for (int64_t b = s.kv_begin; b < s.kv_begin + s.kv_len; ++b) {
              // The kernel's causal rule on the local diagonal (SeqRows pos = local row): key b visible iff b <= a.
              if (s.mask == kernels::BlockMask::causal && b > a) continue;
              ++count[size_t(q_pos[size_t(a)] * seq + kv_pos[size_t(b)])];
              ++work[size_t(r)];
            }
        }
      }
      int64_t wrong = 0;
      for (int64_t qi = 0; qi < seq; ++qi)
        for (int64_t kj = 0; kj < seq; ++kj) wrong += count[size_t(qi * seq + kj)] != (kj <= qi ? 1 : 0);
      INFO(seq_layout_name(layout) << " cp " << cp);
      CHECK(wrong == 0);
      // head_tail balances the work: each rank computes seq (seq + 1) / 2 / cp pairs.
      if (layout == SeqLayout::head_tail)
        for (int r = 0; r < cp; ++r) CHECK(work[size_t(r)] == seq * (seq + 1) / 2 / cp);
    }
}

TEST_CASE("ring schedule: the blocks torch's _templated_ring_attention computes, recorded from torch", "[cp]") {
  // tests/runtime/ring_schedule_torch.txt: tests/runtime/check_ring_schedule.py ran torch's ring attention (torch 2.15,
  // gloo, cp 2-4 processes, both rotate methods, 8 local rows) and recorded, per rank and step, the rank whose K/V the
  // block read and the rows of q and k/v it was given (or that the step was skipped).
  std::ifstream in(std::string(TPTUNE_SOURCE_DIR) + "/tests/runtime/ring_schedule_torch.txt");
  REQUIRE(in);
  std::string line;
  int compared = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    INFO(line);
    std::istringstream s(line);
    std::string w, layout_name;
    int cp = 0, rank = 0, step = 0;
    s >> w >> cp >> w >> layout_name >> w >> rank >> w >> step >> w;
    const SeqLayout layout = layout_name == "head_tail" ? SeqLayout::head_tail : SeqLayout::contiguous;
    const RingStep st = ring_step(rank, cp, step, layout, 8);
    if (w == "skip") {
      CHECK(st.skip);
    } else {
      int source = 0, causal = 0;
      int64_t q_begin = 0, q_len = 0, kv_begin = 0, kv_len = 0;
      s >> source >> w >> q_begin >> w >> q_len >> w >> kv_begin >> w >> kv_len >> w >> causal;
      CHECK_FALSE(st.skip);
      CHECK(st.source == source);
      CHECK(st.q_begin == q_begin);
      CHECK(st.q_len == q_len);
      CHECK(st.kv_begin == kv_begin);
      CHECK(st.kv_len == kv_len);
      CHECK((st.mask == kernels::BlockMask::causal) == (causal == 1));
    }
    ++compared;
  }
  CHECK(compared == 2 * (2 * 2 + 3 * 3 + 4 * 4));  // every (layout, cp, rank, step)
}
