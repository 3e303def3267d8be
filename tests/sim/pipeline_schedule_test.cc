// Pipeline schedules (sim/pipeline/schedule.h) and their simulation (sim/pipeline/schedule_sim.h): the action lists
// equal what torch runs (tests/sim/pipeline_schedule_torch.txt, recorded from torch by
// tests/sim/check_pipeline_schedule.py), every schedule runs each (stage, microbatch) once and to its end, the bubble
// of GPipe, 1F1B and interleaved 1F1B on uniform stages equals its closed form, the peak of held activations, the
// zero-bubble schedules' smaller bubble, and the one-line errors.
//
// Cost convention of the closed forms: every stage costs f = 1 us forward and b = 2 us backward (b = 2f), p2p 0.
// A microbatch then occupies a rank f + b = 3 us per stage it holds.
#include <fmt/format.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "plans/util/error.h"
#include "sim/pipeline/schedule.h"
#include "sim/pipeline/schedule_sim.h"
#include "tests/error_text.h"

using namespace tptune;
using tptune::test::error_of;
using Kind = PipelineScheduleKind;

namespace {

std::vector<StageCost> uniform(int stages, double fwd, double bwd, double weight = 0) {
  return std::vector<StageCost>(stages, StageCost{fwd, bwd, weight});
}

std::string joined(const std::vector<PipelineAction>& actions) {
  std::string out;
  for (const PipelineAction& a : actions) {
    if (!out.empty()) out += ' ';
    out += to_string(a);
  }
  return out;
}

// (p - 1) / (m + p - 1), the bubble fraction of GPipe and 1F1B (Narayanan et al. 2021, section 2.2).
double closed_form(int p, int m, int v = 1) { return double(p - 1) / double(v * m + p - 1); }

}  // namespace

TEST_CASE("pipeline schedule names are torchtitan's, parsed case-insensitively as get_schedule_class()") {
  std::vector<std::string> names;
  for (Kind k : all_pipeline_schedule_kinds()) {
    names.emplace_back(to_string(k));
    CHECK(parse_pipeline_schedule(to_string(k), "x") == k);
  }
  CHECK(names == std::vector<std::string>{"GPipe", "1F1B", "Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble",
                                          "ZBVZeroBubble", "DualPipeV"});
  CHECK(parse_pipeline_schedule("interleaved1f1b", "x") == Kind::interleaved_1f1b);
  CHECK(parse_pipeline_schedule("DUALPIPEV", "x") == Kind::dual_pipe_v);
  CHECK(error_of([] { parse_pipeline_schedule("ZeroBubble", "plan.yaml:3: pp_schedule"); }) ==
        "plan.yaml:3: pp_schedule: expected one of GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
        "ZBVZeroBubble, DualPipeV, got 'ZeroBubble'");
  CHECK(default_stages_per_rank(Kind::one_f_one_b) == 1);
  CHECK(default_stages_per_rank(Kind::interleaved_1f1b) == 2);
  CHECK(default_stages_per_rank(Kind::dual_pipe_v) == 2);
}

TEST_CASE("stages sit on ranks as torch places them: looped r, r+p, ..., V r and 2p-1-r") {
  const PipelineSchedule looped = build_schedule(Kind::interleaved_1f1b, 4, 3, 4);
  CHECK(looped.stages_of_rank(1) == std::vector<int>{1, 5, 9});
  CHECK(looped.rank_of_stage(9) == 1);
  const PipelineSchedule v = build_schedule(Kind::zbv_zero_bubble, 4, 2, 8);
  CHECK(v.stages_of_rank(1) == std::vector<int>{1, 6});
  CHECK(v.rank_of_stage(6) == 1);
  CHECK(v.rank_of_stage(4) == 3);  // the turn of the V: stages 3 and 4 both on the last rank
  for (int s = 0; s < v.num_stages(); ++s) CHECK(v.rank_of_stage(s) == (s < 4 ? s : 7 - s));
}

TEST_CASE("each rank's actions equal the order torch runs (recorded from torch by tools/check_pipeline_schedule.py)") {
  std::ifstream in(std::string(TPTUNE_SOURCE_DIR) + "/tests/sim/pipeline_schedule_torch.txt");
  REQUIRE(in);
  std::string line;
  int compared = 0;
  std::map<std::string, int> per_schedule;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t colon = line.find(':');
    REQUIRE(colon != std::string::npos);
    std::istringstream head(line.substr(0, colon));
    std::string name;
    int pp = 0, v = 0, m = 0, rank = 0;
    head >> name >> pp >> v >> m >> rank;
    const std::string expected = line.substr(colon + 2);
    const PipelineSchedule s = build_schedule(parse_pipeline_schedule(name, "torch file"), pp, v, m);
    INFO(line);
    REQUIRE(rank < static_cast<int>(s.ranks.size()));
    CHECK(joined(s.ranks[rank]) == expected);
    ++compared;
    ++per_schedule[name];
  }
  CHECK(per_schedule.size() == all_pipeline_schedule_kinds().size());  // every schedule compared
  CHECK(compared >= 60);
}

TEST_CASE("every schedule runs each (stage, microbatch) once, on its rank, and to its end") {
  // Property over every kind, pp 1..5, stages_per_rank 1..3, microbatches 1..12: build_schedule() either refuses
  // (torch's checks) or returns lists in which each (stage, microbatch) has one F and one B, or one I and one W after
  // it; simulate_schedule() checks the same and that no rank waits forever, on uniform and on random costs with a
  // p2p hop.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> cost(0.1, 5.0);
  int built = 0;
  for (Kind k : all_pipeline_schedule_kinds())
    for (int pp = 1; pp <= 5; ++pp)
      for (int v = 1; v <= 3; ++v)
        for (int m = 1; m <= 12; ++m) {
          PipelineSchedule s;
          try {
            s = build_schedule(k, pp, v, m);
          } catch (const Error&) {
            continue;
          }
          ++built;
          INFO(fmt::format("{} pp {} v {} m {}", to_string(k), pp, v, m));
          std::map<std::tuple<int, int, PipelineActionKind>, int> count;
          for (int r = 0; r < pp; ++r)
            for (const PipelineAction& a : s.ranks[r]) {
              CHECK(s.rank_of_stage(a.stage) == r);
              ++count[{a.stage, a.microbatch, a.kind}];
            }
          for (int st = 0; st < s.num_stages(); ++st)
            for (int mb = 0; mb < m; ++mb) {
              const int f = count[{st, mb, PipelineActionKind::F}], b = count[{st, mb, PipelineActionKind::B}];
              const int i = count[{st, mb, PipelineActionKind::I}], w = count[{st, mb, PipelineActionKind::W}];
              CHECK(f == 1);
              CHECK(((b == 1 && i == 0 && w == 0) || (b == 0 && i == 1 && w == 1)));
              if (!splits_backward(k)) CHECK(b == 1);
            }
          CHECK_NOTHROW(simulate_schedule(s, uniform(s.num_stages(), 1, 2, 1), 0));
          std::vector<StageCost> random;
          for (int st = 0; st < s.num_stages(); ++st) {
            const double bwd = cost(rng);
            random.push_back({cost(rng), bwd, bwd * 0.4});
          }
          CHECK_NOTHROW(simulate_schedule(s, random, 0.3));
        }
  // Built, of 7 kinds x 5 pp x 3 v x 12 m = 1260: GPipe v 1: 5 x 12 = 60. 1F1B v 1, m >= pp: 12+11+10+9+8 = 50.
  // Interleaved1F1B and InterleavedZeroBubble: 3 x 60 less the m that are not a multiple of max(1, m / pp) (pp 2: m 5,
  // 7, 9, 11; pp 3: 7, 10, 11; pp 4: 9, 11; pp 5: 11; 10 per v): 180 - 30 = 150 each. LoopedBFS 180. ZBVZeroBubble
  // v 2: 60. DualPipeV v 2, m >= 2 pp: 11+9+7+5+3 = 35. Sum 60+50+150+180+150+60+35 = 685.
  CHECK(built == 685);
}

TEST_CASE("GPipe and 1F1B bubble on uniform stages = (p - 1) / (m + p - 1)") {
  // GPipe, p = 4, m = 8, f = 1, b = 2: rank 3 ends its 8 forwards at (3 + 8) x 1 = 11; the backwards then run back
  // up, rank 0 ending at 11 + (3 + 8) x 2 = 33 = (m + p - 1)(f + b). Every rank is busy m(f + b) = 24, idle 9, and
  // 9 / 33 = 3 / 11 = (p - 1) / (m + p - 1). 1F1B has the same step (its steady state interleaves the same work).
  const PipelineTimeline gpipe = simulate_schedule(build_schedule(Kind::gpipe, 4, 1, 8), uniform(4, 1, 2), 0);
  CHECK(gpipe.step_us == Approx(33));
  CHECK(gpipe.ranks[0].busy_us == Approx(24));
  CHECK(gpipe.ranks[0].idle_us == Approx(9));
  CHECK(gpipe.bubble_fraction() == Approx(3.0 / 11.0));
  for (Kind k : {Kind::gpipe, Kind::one_f_one_b})
    for (int p : {2, 3, 4, 8})
      for (int m : {1, 2, 3, 4, 5, 8, 12, 16, 32}) {
        if (k == Kind::one_f_one_b && m < p) continue;  // refused by torch
        INFO(fmt::format("{} p {} m {}", to_string(k), p, m));
        const PipelineTimeline tl = simulate_schedule(build_schedule(k, p, 1, m), uniform(p, 1, 2), 0);
        CHECK(tl.step_us == Approx((m + p - 1) * 3.0));
        for (const PipelineRankTimeline& r : tl.ranks) CHECK(r.idle_fraction == Approx(closed_form(p, m)));
      }
}

TEST_CASE("interleaved 1F1B bubble with v stages per rank = (p - 1) / (v m + p - 1)") {
  // v stages per rank, each a 1/v share of a rank's layers: f = 1/v, b = 2/v per stage. A microbatch occupies a rank
  // v (f + b) = 3 us, as with one stage; the fill and drain are p - 1 stage-steps of (f + b) = 3/v each:
  // step = (v m + p - 1) x 3 / v, busy = m x 3, idle fraction (p - 1) / (v m + p - 1).
  // p = 4, v = 2, m = 8: step = (16 + 3) x 1.5 = 28.5, busy 24, 4.5 / 28.5 = 3 / 19.
  const PipelineTimeline tl = simulate_schedule(build_schedule(Kind::interleaved_1f1b, 4, 2, 8), uniform(8, 0.5, 1), 0);
  CHECK(tl.step_us == Approx(28.5));
  CHECK(tl.bubble_fraction() == Approx(3.0 / 19.0));
  // Every m >= p that torch accepts (flexible rounds included: p 4, m 10 is 2 rounds of 5). With m < p, each of the
  // v - 1 wraps from the last rank back to rank 0 waits p - m stage-steps (microbatch 0 comes back after p stage-steps,
  // rank 0 has only m to fill them with): gap = (v - 1)(p - m), idle fraction (p - 1 + gap) / (v m + p - 1 + gap).
  // p 4, v 2, m 3: gap 1, step (6 + 3 + 1) x 1.5 = 15, fraction 4 / 10 (not the 3 / 9 of the closed form).
  const PipelineTimeline few =
      simulate_schedule(build_schedule(Kind::interleaved_1f1b, 4, 2, 3), uniform(8, 0.5, 1), 0);
  CHECK(few.step_us == Approx(15));
  CHECK(few.bubble_fraction() == Approx(0.4));
  int checked = 0;
  for (int p : {2, 3, 4, 5})
    for (int v : {1, 2, 3, 4})
      for (int m = 1; m <= 3 * p + 1; ++m) {
        PipelineSchedule s;
        try {
          s = build_schedule(Kind::interleaved_1f1b, p, v, m);
        } catch (const Error&) {
          continue;  // m not a multiple of its rounds
        }
        INFO(fmt::format("p {} v {} m {}", p, v, m));
        const PipelineTimeline t = simulate_schedule(s, uniform(p * v, 1.0 / v, 2.0 / v), 0);
        const int gap = m < p ? (v - 1) * (p - m) : 0;
        CHECK(t.step_us == Approx((v * m + p - 1 + gap) * 3.0 / v));
        for (const PipelineRankTimeline& r : t.ranks)
          CHECK(r.idle_fraction == Approx(double(p - 1 + gap) / double(v * m + p - 1 + gap)));
        if (m >= p)
          for (const PipelineRankTimeline& r : t.ranks) CHECK(r.idle_fraction == Approx(closed_form(p, m, v)));
        ++checked;
      }
  CHECK(checked > 100);  // most of the 4 v x (7 + 10 + 13 + 16) m = 184 cases are accepted
}

TEST_CASE("a p2p hop adds 2 (p - 1) hops to GPipe's step: the forwards' and the backwards' path") {
  // p = 4, m = 8, f = 1, b = 2, hop h = 0.5: the first microbatch reaches rank 3 after 3 (f + h); the gradient of the
  // last returns to rank 0 through 3 hops: step = 33 + 2 x 3 x 0.5 = 36.
  const PipelineTimeline tl = simulate_schedule(build_schedule(Kind::gpipe, 4, 1, 8), uniform(4, 1, 2), 0.5);
  CHECK(tl.step_us == Approx(36));
  CHECK(tl.ranks[3].actions.front().start_us == Approx(4.5));  // 3 x (1 + 0.5)
  // Two stages on one rank hand over without a hop: ZBV's stages 3 and 4 are both on rank 3 (pp 4).
  const PipelineTimeline v = simulate_schedule(build_schedule(Kind::zbv_zero_bubble, 4, 2, 8), uniform(8, 1, 2, 1), 10);
  const auto& r3 = v.ranks[3].actions;
  const auto f3 = std::find_if(r3.begin(), r3.end(), [](const TimedPipelineAction& a) {
    return a.action == PipelineAction{3, 0, PipelineActionKind::F};
  });
  const auto f4 = std::find_if(r3.begin(), r3.end(), [](const TimedPipelineAction& a) {
    return a.action == PipelineAction{4, 0, PipelineActionKind::F};
  });
  REQUIRE(f3 != r3.end());
  REQUIRE(f4 != r3.end());
  CHECK(f3->start_us == Approx(3 * (1 + 10)));  // three hops from stage 0
  CHECK(f4->start_us == Approx(f3->end_us));    // no hop from stage 3 to stage 4
}

TEST_CASE("peak held activations: GPipe m, 1F1B p - r (rank 0: min(p, m)), LoopedBFS v m") {
  for (int p : {2, 4})
    for (int m : {4, 8}) {
      const auto gp = simulate_schedule(build_schedule(Kind::gpipe, p, 1, m), uniform(p, 1, 2), 0);
      const auto one = simulate_schedule(build_schedule(Kind::one_f_one_b, p, 1, m), uniform(p, 1, 2), 0);
      const auto bfs = simulate_schedule(build_schedule(Kind::looped_bfs, p, 2, m), uniform(2 * p, 1, 2), 0);
      for (int r = 0; r < p; ++r) {
        CHECK(gp.ranks[r].peak_activations == m);  // every forward before any backward
        // warmup min(m, p - r) forwards, then each backward frees one before the next forward
        CHECK(one.ranks[r].peak_activations == std::min(m, p - r));
        CHECK(bfs.ranks[r].peak_activations == 2 * m);  // both local stages' forwards of every microbatch first
      }
      CHECK(one.ranks[0].peak_activations == std::min(p, m));
    }
  // GPipe with fewer microbatches than stages: rank 0 still holds all m.
  CHECK(simulate_schedule(build_schedule(Kind::gpipe, 4, 1, 2), uniform(4, 1, 2), 0).ranks[0].peak_activations == 2);
}

TEST_CASE("zero-bubble schedules leave less bubble than 1F1B on the same model") {
  // The same model on p = 4 ranks, m = 8 microbatches: one stage per rank costs f = 2, b = 4 of which w = 2
  // (forward = input gradient = weight gradient, the zero-bubble paper's assumption); two stages per rank cost half.
  // 1F1B: (p - 1) / (m + p - 1) = 3 / 11 = 0.27.
  const double one_f_one_b =
      simulate_schedule(build_schedule(Kind::one_f_one_b, 4, 1, 8), uniform(4, 2, 4, 2), 0).bubble_fraction();
  CHECK(one_f_one_b == Approx(3.0 / 11.0));
  for (Kind k : {Kind::interleaved_zero_bubble, Kind::zbv_zero_bubble, Kind::dual_pipe_v}) {
    INFO(to_string(k));
    const PipelineTimeline tl = simulate_schedule(build_schedule(k, 4, 2, 8), uniform(8, 1, 2, 1), 0);
    CHECK(tl.bubble_fraction() < one_f_one_b);
    CHECK(tl.ranks[0].busy_us == Approx(8 * 2 * 3.0));  // same work: m x 2 stages x (1 + 2)
  }
  // And below interleaved 1F1B with the same two stages per rank.
  const double interleaved =
      simulate_schedule(build_schedule(Kind::interleaved_1f1b, 4, 2, 8), uniform(8, 1, 2, 1), 0).bubble_fraction();
  CHECK(simulate_schedule(build_schedule(Kind::interleaved_zero_bubble, 4, 2, 8), uniform(8, 1, 2, 1), 0)
            .bubble_fraction() < interleaved);
}

TEST_CASE("schedules torch refuses, and sizes out of range, are one-line errors") {
  CHECK(error_of([] { build_schedule(Kind::one_f_one_b, 4, 1, 3); }) ==
        "pipeline schedule 1F1B: needs microbatches >= pp (the number of stages), got 3 < 4");
  CHECK(error_of([] { build_schedule(Kind::dual_pipe_v, 4, 2, 7); }) ==
        "pipeline schedule DualPipeV: needs microbatches >= 2 x pp (the number of stages), got 7 < 8");
  // rounds = max(1, 5 / 2) = 2, and 5 is not a multiple of 2
  CHECK(error_of([] { build_schedule(Kind::interleaved_1f1b, 2, 2, 5); }) ==
        "pipeline schedule Interleaved1F1B: needs microbatches a multiple of the rounds max(1, microbatches / pp) = "
        "2, got 5 (pp 2)");
  CHECK(error_of([] { build_schedule(Kind::interleaved_zero_bubble, 4, 2, 10); }) == "(no error)");  // 2 rounds of 5
  CHECK(error_of([] { build_schedule(Kind::gpipe, 2, 2, 4); }) ==
        "pipeline schedule GPipe: a single-stage schedule needs stages_per_rank 1, got 2");
  CHECK(error_of([] { build_schedule(Kind::zbv_zero_bubble, 2, 3, 4); }) ==
        "pipeline schedule ZBVZeroBubble: a V-shaped schedule needs stages_per_rank 2, got 3");
  CHECK(error_of([] { build_schedule(Kind::gpipe, 0, 1, 4); }) ==
        "pipeline schedule GPipe: pp must be in [1, 1048576], got 0");
  CHECK(error_of([] { build_schedule(Kind::looped_bfs, 2, 0, 4); }) ==
        "pipeline schedule LoopedBFS: stages_per_rank must be in [1, 10000], got 0");
  CHECK(error_of([] { build_schedule(Kind::gpipe, 2, 1, 0); }) ==
        "pipeline schedule GPipe: microbatches must be in [1, 65536], got 0");
  CHECK(error_of([] { build_schedule(Kind::looped_bfs, 1 << 20, 10000, 65536); }) ==
        "pipeline schedule LoopedBFS: pp 1048576 x stages_per_rank 10000 x microbatches 65536 x 3 = "
        "2061584302080000 actions, more than the 16777216 a schedule may hold");

  const PipelineSchedule s = build_schedule(Kind::one_f_one_b, 2, 1, 2);
  CHECK(error_of([&] { simulate_schedule(s, uniform(3, 1, 2), 0); }) ==
        "pipeline schedule 1F1B (pp 2, stages_per_rank 1, microbatches 2): expected 2 stage costs (one per stage), "
        "got 3");
  CHECK(error_of([&] { simulate_schedule(s, uniform(2, 1, 2, 3), 0); }) ==
        "pipeline schedule 1F1B (pp 2, stages_per_rank 1, microbatches 2): stage 0 bwd_weight_us 3 exceeds its "
        "bwd_us 2 (the weight gradient is part of the backward)");
  CHECK(error_of([&] { simulate_schedule(s, uniform(2, -1, 2), 0); }) ==
        "pipeline schedule 1F1B (pp 2, stages_per_rank 1, microbatches 2): stage 0 fwd_us must be a finite time >= 0 "
        "us, got -1");
  CHECK(error_of([&] { simulate_schedule(s, uniform(2, 1, 2), -0.5); }) ==
        "pipeline schedule 1F1B (pp 2, stages_per_rank 1, microbatches 2): p2p_us must be a finite time >= 0 us, got "
        "-0.5");
}

TEST_CASE("a hand-edited schedule that cannot run, or runs an action twice, is an error, not a hang") {
  PipelineSchedule s = build_schedule(Kind::gpipe, 2, 1, 2);
  std::swap(s.ranks[1][0], s.ranks[1][2]);  // rank 1: 1B0 before its 1F0
  CHECK(error_of([&] { simulate_schedule(s, uniform(2, 1, 2), 0); }) ==
        "pipeline schedule GPipe (pp 2, stages_per_rank 1, microbatches 2): cannot run to its end: rank 0 at 0B0, "
        "rank 1 at 1B0 wait for actions that never run");
  PipelineSchedule twice = build_schedule(Kind::gpipe, 2, 1, 2);
  twice.ranks[0][1] = twice.ranks[0][0];  // 0F0 twice, no 0F1
  CHECK(error_of([&] { simulate_schedule(twice, uniform(2, 1, 2), 0); }) ==
        "pipeline schedule GPipe (pp 2, stages_per_rank 1, microbatches 2): 0F0 runs twice");
  PipelineSchedule wrong_rank = build_schedule(Kind::gpipe, 2, 1, 2);
  wrong_rank.ranks[0].push_back({1, 0, PipelineActionKind::F});
  CHECK(error_of([&] { simulate_schedule(wrong_rank, uniform(2, 1, 2), 0); }) ==
        "pipeline schedule GPipe (pp 2, stages_per_rank 1, microbatches 2): rank 0 has 1F0, but stage 1 is on rank 1");
}
