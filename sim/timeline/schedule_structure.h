#pragma once
// The scheduler's per-structure facts (sim/timeline/timeline.cc's Scheduler, kept by ScheduleCache in
// sim/timeline/timeline.h): internal to sim/timeline/timeline.cc and split from it by concept; no other file includes
// it.

#include <memory>
#include <vector>

#include "plans/program/program.h"
#include "sim/cost/cost_params.h"
#include "sim/timeline/dataflow.h"
#include "sim/timeline/timeline.h"

namespace tptune {

// ---- ScheduleStructure ---------------------------------------------------------------------------------------------

// What the scheduler derives from a Program's structure alone: its dataflow, and each op's stream, dependencies,
// place in its unit and contention. It reads only what structure_words() lists, so it serves every Program with the
// same words (the search's Programs of one structure and policy at each local batch size: BatchProgram::at() and
// the finished Programs it is made from differ in sizes only); the durations and the host's dispatch are the
// schedule's own (OpCosts, dispatch_us()).
struct ScheduleStructure {
  struct Op {
    Stream stream = Stream::compute;  // where it is scheduled: stream_of(op), or compute for a collective that cannot
                                      // overlap compute (CostParams::comm_overlaps_compute 0)
    Stream label = Stream::compute;   // stream_of(op): what its time counts as (compute, or TP / DP communication)
    int index = 0;                    // Dataflow::op_index(): into the schedule's durations and dispatch times
    std::span<const int> deps;        // Op::deps (a copy: deps_)
    std::span<const TensorId> ext;    // inputs and outputs with no earlier writer in the segment
    size_t ext_offset = 0;            // Dataflow::outside_offset(): into writers
    bool prefetched = false;          // issued by the previous unit
    double contention = 0;            // a collective's slowdown of the compute it overlaps (CostParams)
  };

  std::vector<int64_t> words;  // structure_words() of the Program it was built from
  uint64_t hash = 0;           // words_hash() of `words` (kept structures only)
  std::optional<Dataflow> flow;
  std::vector<std::vector<Op>> ops;
  std::vector<std::vector<int>> own, pf;            // per segment: own ops in order; ops the previous unit issues
  std::vector<std::vector<int>> busy_own, busy_pf;  // the same, only the collectives that slow compute
  std::vector<int> insert_after;  // per segment: index in own after which the next instance's prefetched ops are
                                  // issued (its first compute op)
  std::vector<int> instances;
  std::vector<int> deps;  // every op's deps, concatenated (kept structures only: else Op::deps point into the Program)
  // Dataflow::last_writer() of each outside value (ext_offset + its place in ext) at instances 0 .. kWriterSlots-2
  // and at the segment's last instance (slot kWriterSlots-1), filled as the schedules ask for them (the steady
  // state's units are among these); `unknown` until then. Empty in a structure built for one schedule.
  static constexpr int kWriterSlots = 6;
  static constexpr int kUnknown = -2;
  std::vector<Writer> writers;

  // The words that decide everything built here: what Dataflow reads (the layer counts, each tensor's per_layer,
  // the chains, each segment's kind, repeat, direction and layers, each op's inputs and outputs), and what the
  // scheduler reads of each op (its kind and collective group and kind: stream, prefetch and contention; its deps)
  // and of the CostParams.
  // `stop()`: true when the caller has seen enough (matches() after a mismatch); checked per segment and per op.
  struct NeverStop {
    bool operator()() const { return false; }
  };
  template <class F, class Stop = NeverStop>
  static void structure_words(const Program& p, const CostParams& c, F&& w, Stop stop = {}) {
    w(p.model.n_layers);
    w(p.first_layer());
    w(p.layer_count());
    w(c.comm_overlaps_compute);
    w(std::bit_cast<int64_t>(c.overlap_compute_slowdown));
    w(std::bit_cast<int64_t>(c.overlap_p2p_compute_slowdown));
    w(static_cast<int64_t>(p.tensors.size()));
    int64_t bits = 0;  // per_layer, 63 tensors a word
    int n = 0;
    for (const TensorDesc& t : p.tensors) {
      bits = bits << 1 | static_cast<int64_t>(t.per_layer);
      if (++n == 63) {
        w(bits);
        bits = 0;
        n = 0;
      }
    }
    w(bits);
    w(static_cast<int64_t>(p.chains.size()));
    for (const LayerChain& ch : p.chains) {
      w(ch.in);
      w(ch.out);
      w(ch.source);
      w(ch.sink);
      w(ch.reverse);
    }
    w(static_cast<int64_t>(p.segments.size()));
    for (const Segment& seg : p.segments) {
      if (stop()) return;
      w(static_cast<int64_t>(seg.kind));
      w(seg.repeat);
      w(seg.reverse);
      w(seg.first_layer);
      w(seg.layer_count);
      w(static_cast<int64_t>(seg.ops.size()));
      for (const tptune::Op& op : seg.ops) {
        if (stop()) return;
        int64_t kind = static_cast<int64_t>(op.kind.index()) << 16;
        if (auto* col = std::get_if<CollectiveOp>(&op.kind))
          kind |= static_cast<int64_t>(col->group) << 8 | static_cast<int64_t>(col->kind);
        w(kind);
        w(static_cast<int64_t>(op.inputs.size()));
        for (TensorId x : op.inputs) w(x);
        w(static_cast<int64_t>(op.outputs.size()));
        for (TensorId x : op.outputs) w(x);
        w(static_cast<int64_t>(op.deps.size()));
        for (int d : op.deps) w(d);
      }
    }
  }

  // A hash of structure_words(), folded in as they come (FNV-1a over the words).
  static constexpr uint64_t kHashBasis = 14695981039346656037ull;
  static uint64_t hash_word(uint64_t h, int64_t x) { return (h ^ static_cast<uint64_t>(x)) * 1099511628211ull; }

  bool matches(const Program& p, const CostParams& c) const {
    const int64_t *at = words.data(), *end = at + words.size();
    bool same = true;
    structure_words(
        p, c, [&](int64_t x) { same = same && at != end && *at++ == x; }, [&] { return !same; });
    return same && at == end;
  }

  // `keep`: record the words, for matches() (a structure built for one schedule only need not).
  void build(const Program& p, const CostParams& c, bool keep) {
    words.clear();
    if (keep) structure_words(p, c, [&](int64_t x) { words.push_back(x); });
    build_from_words(p, c, keep);
  }
  // build() once `words` holds p's structure_words() (or is empty, when not `keep`).
  void build_from_words(const Program& p, const CostParams& c, bool keep) {
    flow.reset();
    flow.emplace(p);
    const size_t ns = p.segments.size();
    ops.assign(ns, {});
    for (auto* v : {&own, &pf, &busy_own, &busy_pf}) v->assign(ns, {});
    insert_after.assign(ns, -1);
    instances.assign(ns, 0);
    deps.clear();
    if (keep)  // else the ops' deps are read from `p`, which outlives the one schedule
      for (const Segment& seg : p.segments)
        for (const tptune::Op& op : seg.ops) deps.insert(deps.end(), op.deps.begin(), op.deps.end());
    size_t next_dep = 0;
    for (size_t s = 0; s < ns; ++s) {
      const Segment& seg = p.segments[s];
      const int si = static_cast<int>(s);
      instances[s] = flow->instances(si);
      ops[s].reserve(seg.ops.size());
      for (size_t j = 0; j < seg.ops.size(); ++j) {
        const tptune::Op& op = seg.ops[j];
        const int ji = static_cast<int>(j);
        Op t;
        t.label = stream_of(op);
        t.stream = c.comm_overlaps_compute ? t.label : Stream::compute;
        t.index = static_cast<int>(flow->op_index(si, ji));
        t.deps = keep ? std::span<const int>(deps.data() + next_dep, op.deps.size()) : std::span<const int>(op.deps);
        next_dep += op.deps.size();
        t.ext = flow->outside(si, ji);
        t.ext_offset = flow->outside_offset(si, ji);
        t.prefetched = is_prefetched(op);
        if (auto* col = std::get_if<CollectiveOp>(&op.kind); col && c.comm_overlaps_compute)
          t.contention = col->kind == CollectiveKind::p2p ? c.overlap_p2p_compute_slowdown : c.overlap_compute_slowdown;
        if (t.contention > 0 && t.stream != Stream::compute) (t.prefetched ? busy_pf : busy_own)[s].push_back(ji);
        if (t.prefetched) {
          pf[s].push_back(ji);
        } else {
          if (insert_after[s] < 0 && t.label == Stream::compute) insert_after[s] = static_cast<int>(own[s].size());
          own[s].push_back(ji);
        }
        ops[s].push_back(t);
      }
      if (insert_after[s] < 0) insert_after[s] = static_cast<int>(own[s].size()) - 1;  // no compute: at the end
    }
    if (keep)
      writers.assign(flow->outside_count() * kWriterSlots, Writer{kUnknown, -1, -1, false});
    else
      writers.clear();  // no later schedule to keep them for
  }
};

}  // namespace tptune
