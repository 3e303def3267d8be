#include "sim/timeline/timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <variant>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "sim/cost/comm_cost.h"
#include "sim/cost/compute_cost.h"
#include "sim/shared_machine.h"
#include "sim/timeline/dataflow.h"
#include "sim/timeline/fsdp_copies.h"
#include "sim/timeline/schedule_structure.h"

namespace tptune {

// ---- SegmentTimes ---------------------------------------------------------------------------------------------------

double SegmentTimes::shift(int instance) const {
  if (steady_from < 0 || instance <= steady_from || instance == instances - 1) return 0;
  return (instance - steady_from) * period_us;
}

ScheduleCache::ScheduleCache() = default;
ScheduleCache::~ScheduleCache() = default;
ScheduleCache::ScheduleCache(ScheduleCache&&) noexcept = default;
ScheduleCache& ScheduleCache::operator=(ScheduleCache&&) noexcept = default;

namespace {

constexpr double kTol = 1e-6;  // us; times are sums of the same durations, so shifts agree far closer than this

// The wait charged to an op that stream s held back, by Stream's value (0 .. kStreams - 1, sim/timeline/timeline.h).
constexpr Wait kWaitOfStream[] = {Wait::compute, Wait::tp, Wait::dp, Wait::dp_replicate, Wait::cp, Wait::ep};
static_assert(std::size(kWaitOfStream) == kStreams && static_cast<int>(Stream::ep) == kStreams - 1);

Wait wait_of(Stream s) {
  const auto i = static_cast<size_t>(s);
  return i < std::size(kWaitOfStream) ? kWaitOfStream[i] : Wait::none;
}

// The ready time of an outside value, and whether its writer is periodic (see Dataflow).
struct Resolved {
  bool found = false;
  bool periodic = false;
  double end = 0;
  Stream stream = Stream::compute;
};

using TemplateOp = ScheduleStructure::Op;

// A collective running on a communication stream, slowing compute by `s` while it runs; `seg`: its segment.
struct Busy {
  double start = 0, end = 0, s = 0;
  int seg = -1;
};

struct Slot {
  int seg = -1, inst = -1;
};

class Scheduler {
 public:
  // `st`: built from a Program with p's structure_words() (ScheduleStructure::matches()).
  Scheduler(const Program& p, const OpCosts& costs, const CostParams& c, ScheduleStructure& st)
      : p_(p),
        st_(st),
        flow_(*st.flow),
        ops_(st.ops),
        own_(st.own),
        pf_(st.pf),
        busy_own_(st.busy_own),
        busy_pf_(st.busy_pf),
        insert_after_(st.insert_after),
        instances_(st.instances) {
    const size_t ns = p.segments.size();
    if (costs.duration_us.size() != ns) throw Error("schedule: OpCosts do not match the Program");
    duration_.resize(flow_.op_count());
    for (size_t s = 0; s < ns; ++s) {
      const Segment& seg = p.segments[s];
      if (costs.duration_us[s].size() != seg.ops.size()) throw Error("schedule: OpCosts do not match the Program");
      for (size_t j = 0; j < seg.ops.size(); ++j)
        duration_[flow_.op_index(static_cast<int>(s), static_cast<int>(j))] = costs.duration_us[s][j];
    }
    dispatch_.reserve(flow_.op_count());
    append_dispatch_us(p, c, costs.cuda_graph, dispatch_);  // (in op index order: segment by segment)
  }

  // ---- the fast path -----------------------------------------------------------------------------------------------
  Timeline run() {
    Timeline tl;
    init(tl);
    double free[kStreams] = {};
    Slot first = next_instance(-1, 0);
    if (first.seg >= 0) issue_prefetched(first, 0, free, &before_first_);
    for (size_t si = 0; si < p_.segments.size(); ++si) {
      const int s = static_cast<int>(si);
      SegmentTimes& st = tl.segments[si];
      const int R = st.instances;
      if (st.ops == 0) continue;
      int next_check = 1;
      for (int k = 0; k < R; ++k) {
        const bool tail = st.steady_from >= 0 && k == R - 1;
        InstanceStats stats;
        run_unit(s, k, free, stats);
        if (tail) {
          st.tail_stats = stats;
          break;
        }
        st.stats.push_back(stats);
        if (st.steady_from < 0 && k >= next_check && k + 3 <= R) {
          int fail = try_steady(s, k);
          if (fail >= 0) {
            next_check = fail;
            continue;
          }
          // Steady: units k+1 .. R-2 are extrapolated; resume with the state after unit R-2, then simulate R-1.
          st.tail.assign(static_cast<size_t>(st.ops), OpTime{});
          end_state(s, R - 2, free);
          extrapolated_host_and_running(s, k, R - 2, free);
          k = R - 2;
        }
      }
    }
    finish(tl, free);
    return tl;
  }

  // ---- the reference: expand() and schedule every flat op in issue order -------------------------------------------
  Timeline run_expanded() {
    Timeline tl;
    init(tl);
    FlatProgram flat = expand(p_);
    std::vector<size_t> base(p_.segments.size() + 1, 0);
    for (size_t s = 0; s < p_.segments.size(); ++s)
      base[s + 1] = base[s] + static_cast<size_t>(instances_[s]) * ops_[s].size();
    if (base.back() != flat.ops.size()) throw Error("schedule_expanded: expand() has an unexpected op count");
    std::vector<OpTime> ft(flat.ops.size());
    std::vector<char> done(flat.ops.size(), 0);
    double free[kStreams] = {};
    auto process = [&](int s, int i, int j, double bound, InstanceStats* stats, bool& first_compute, bool own) {
      const size_t idx = base[static_cast<size_t>(s)] + static_cast<size_t>(i) * ops_[static_cast<size_t>(s)].size() +
                         static_cast<size_t>(j);
      const FlatOp& f = flat.ops[idx];
      if (f.op != &p_.segments[static_cast<size_t>(s)].ops[static_cast<size_t>(j)])
        throw Error("schedule_expanded: expand() visited ops in an unexpected order");
      const TemplateOp& o = ops_[static_cast<size_t>(s)][static_cast<size_t>(j)];
      current_seg_ = s;
      double t = free[static_cast<int>(o.stream)];
      Wait w = Wait::stream;
      for (int d : f.deps) {
        if (!done[static_cast<size_t>(d)])
          throw Error("schedule_expanded: " + f.name + " depends on " + flat.ops[static_cast<size_t>(d)].name +
                      ", which is issued after it");
        if (ft[static_cast<size_t>(d)].end > t) {
          t = ft[static_cast<size_t>(d)].end;
          w = wait_of(flat_stream(flat, d));
        }
      }
      wait_for_issue(o, bound, t, w);
      double extra = 0;
      OpTime ot{t, finish(o, t, extra), w};
      if (stats && (own || is_serialized_comm(o))) account(o, ot, extra, free, *stats, first_compute);
      free[static_cast<int>(o.stream)] = ot.end;
      compute_free_ = free[0];
      ft[idx] = ot;
      done[idx] = 1;
      SegmentTimes& st = tl.segments[static_cast<size_t>(s)];
      st.rows[static_cast<size_t>(i) * static_cast<size_t>(st.ops) + static_cast<size_t>(j)] = ot;
    };
    for (size_t s = 0; s < p_.segments.size(); ++s) {
      SegmentTimes& st = tl.segments[s];
      st.rows.resize(static_cast<size_t>(st.instances) * static_cast<size_t>(st.ops));
    }
    bool unused = true;
    Slot first = next_instance(-1, 0);
    if (first.seg >= 0)
      for (int j : pf_[static_cast<size_t>(first.seg)]) process(first.seg, 0, j, 0, &before_first_, unused, false);
    for (size_t si = 0; si < p_.segments.size(); ++si) {
      const int s = static_cast<int>(si);
      SegmentTimes& st = tl.segments[si];
      for (int k = 0; k < st.instances && st.ops > 0; ++k) {
        InstanceStats stats;
        const double compute_before = free[0];
        bool first_compute = true;
        const Slot next = next_instance(s, k);
        auto issue = [&] {
          if (next.seg < 0) return;
          double bound = first_compute ? 0 : stats.first_compute_start;
          for (int j : pf_[static_cast<size_t>(next.seg)])
            process(next.seg, next.inst, j, bound, &stats, unused, false);
        };
        const std::vector<int>& own = own_[si];
        if (own.empty()) issue();
        for (size_t x = 0; x < own.size(); ++x) {
          process(s, k, own[x], 0, &stats, first_compute, true);
          if (static_cast<int>(x) == insert_after_[si]) issue();
        }
        stats.span_us = free[0] - compute_before;
        st.stats.push_back(stats);
      }
    }
    finish(tl, free);
    return tl;
  }

 private:
  const Program& p_;
  ScheduleStructure& st_;                   // (its writers filled as resolve() asks)
  const bool memo_ = !st_.writers.empty();  // the structure keeps writers (ScheduleStructure::build(), `keep`)
  const Dataflow& flow_;
  const std::vector<std::vector<TemplateOp>>& ops_;
  const std::vector<std::vector<int>>&own_, &pf_, &busy_own_, &busy_pf_;  // see ScheduleStructure
  const std::vector<int>&insert_after_, &instances_;
  std::vector<double> duration_, dispatch_;  // by op index: OpCosts::duration_us, dispatch_us()
  double duration(const TemplateOp& o) const { return duration_[static_cast<size_t>(o.index)]; }
  std::vector<SegmentTimes>* times_ = nullptr;
  InstanceStats before_first_;  // the first segment's prefetched all-gathers, issued before any unit
  double host_ = 0;             // when the host has issued every op processed so far
  std::vector<Busy> running_;   // collectives that may still run beside the next compute op

  // The host issues `o` after everything before it: returns the time it is issued (host_ after it).
  double issue_on_host(const TemplateOp& o) {
    host_ += dispatch_[static_cast<size_t>(o.index)];
    return host_;
  }

  // The last two waits of every op, after its dependencies (t, w: when it could start, and why): a prefetched
  // collective waits for its `bound`, and every op for the host to issue it.
  void wait_for_issue(const TemplateOp& o, double bound, double& t, Wait& w) {
    if (o.prefetched && bound > t) {
      t = bound;
      w = Wait::issue;
    }
    if (issue_on_host(o) > t) {
      t = host_;
      w = Wait::host;
    }
  }

  // When `o`, starting at t, ends. A compute op progresses at 1 / (1 + sum of s) while collectives issued before it
  // run (`extra`: the time that adds); a collective that slows compute is remembered.
  double finish(const TemplateOp& o, double t, double& extra) {
    extra = 0;
    if (o.label == Stream::compute) {
      const double d = duration(o);
      const double end = stretched_end(t, d);
      if (end != t + d) extra = end - (t + d);
      return t + d + extra;
    }
    const double end = t + duration(o);
    if (o.contention > 0 && o.stream != Stream::compute) remember(Busy{t, end, o.contention, current_seg_});
    return end;
  }

  double stretched_end(double t, double work) {
    // Only the collectives still running at t matter (b.end <= cur is skipped below, and cur >= t): live_, pruned to
    // them in place (its order kept: the order in which the slowdowns are summed), unless t is earlier than an
    // earlier call's, when running_ (every remembered collective but those before the compute stream's free time)
    // is read as before.
    const std::vector<Busy>* list = &running_;
    if (t >= live_floor_) {
      if (live_.empty()) return t + work;  // nothing runs beside it
      std::erase_if(live_, [t](const Busy& x) { return x.end <= t; });
      live_floor_ = t;
      list = &live_;
    }
    double cur = t, left = work;
    for (;;) {
      double s = 0, next = std::numeric_limits<double>::infinity();
      for (const Busy& b : *list) {
        if (b.end <= cur) continue;
        if (b.start <= cur) {
          s += b.s;
          next = std::min(next, b.end);
        } else {
          next = std::min(next, b.start);
        }
      }
      const double need = left * (1 + s);
      if (cur + need <= next) return cur + need;
      left -= (next - cur) / (1 + s);
      cur = next;
    }
  }

  void remember(const Busy& b) {
    if (running_.size() >= 64) {  // drop what ended before any later compute op can start
      const double floor = compute_free_;
      std::erase_if(running_, [floor](const Busy& x) { return x.end <= floor; });
    }
    running_.push_back(b);
    if (b.end > live_floor_) live_.push_back(b);
  }
  // The remembered collectives that end after live_floor_ (the latest start stretched_end() was asked about), in
  // the order remembered.
  std::vector<Busy> live_;
  double live_floor_ = -std::numeric_limits<double>::infinity();
  double compute_free_ = 0;  // the compute stream's free time, for remember()'s pruning
  int current_seg_ = -1;     // the segment of the op being scheduled (Busy::seg)

  // A collective scheduled on the compute stream (comm_overlaps_compute 0): charged as exposed communication to the
  // unit that issues it, prefetched all-gathers included.
  static bool is_serialized_comm(const TemplateOp& o) {
    return o.stream == Stream::compute && o.label != Stream::compute;
  }

  void init(Timeline& tl) {
    times_ = &tl.segments;
    tl.segments.resize(p_.segments.size());
    for (size_t s = 0; s < p_.segments.size(); ++s) {
      SegmentTimes& st = tl.segments[s];
      st.instances = instances_[s];
      st.ops = static_cast<int>(ops_[s].size());
      st.prefetched.resize(ops_[s].size());
      for (size_t j = 0; j < ops_[s].size(); ++j) st.prefetched[j] = ops_[s][j].prefetched;
    }
  }

  static Stream flat_stream(const FlatProgram& flat, int d) { return stream_of(*flat.ops[static_cast<size_t>(d)].op); }

  // The instance after (s, k) in program order, skipping empty segments; {-1, -1} at the end. (-1, 0): the first.
  Slot next_instance(int s, int k) const {
    if (s >= 0 && k + 1 < instances_[static_cast<size_t>(s)]) return {s, k + 1};
    for (int q = s + 1; q < static_cast<int>(ops_.size()); ++q)
      if (!ops_[static_cast<size_t>(q)].empty()) return {q, 0};
    return {};
  }

  // The outside value e of op `o` (o.ext[e]) of instance (seg, inst): when its last writer ends. The writer is the
  // structure's (kept in st_.writers for the instances it has slots for).
  Resolved resolve(const TemplateOp& o, size_t e, int seg, int inst) {
    Resolved r;
    const int n = instances_[static_cast<size_t>(seg)];
    constexpr int kSlots = ScheduleStructure::kWriterSlots;
    const int slot = !memo_ ? -1 : inst == n - 1 ? kSlots - 1 : inst < kSlots - 1 ? inst : -1;
    Writer w;
    if (slot < 0) {
      w = flow_.last_writer(o.ext[e], seg, inst);
    } else {
      Writer& known = st_.writers[(o.ext_offset + e) * kSlots + static_cast<size_t>(slot)];
      if (known.seg == ScheduleStructure::kUnknown) known = flow_.last_writer(o.ext[e], seg, inst);
      w = known;
    }
    if (!w.found()) return r;
    r.found = true;
    r.periodic = w.periodic;
    r.end = (*times_)[static_cast<size_t>(w.seg)].time(w.inst, w.op).end;
    r.stream = ops_[static_cast<size_t>(w.seg)][static_cast<size_t>(w.op)].stream;
    return r;
  }

  void account(const TemplateOp& o, const OpTime& ot, double extra, const double* free, InstanceStats& stats,
               bool& first_compute) const {
    if (o.stream != Stream::compute) return;
    if (o.label != Stream::compute) {  // a collective on the compute stream: the stream waits for all of it
      (o.label == Stream::tp || o.label == Stream::cp || o.label == Stream::ep ? stats.exposed_tp_us
                                                                               : stats.exposed_dp_us) +=
          std::max(0.0, ot.end - free[0]);
      return;
    }
    if (first_compute) {
      stats.first_compute_start = ot.start;
      first_compute = false;
    }
    double gap = ot.start - free[0];
    if (gap > 0) {
      if (ot.wait == Wait::tp || ot.wait == Wait::cp || ot.wait == Wait::ep) stats.exposed_tp_us += gap;
      if (ot.wait == Wait::dp || ot.wait == Wait::dp_replicate || ot.wait == Wait::issue) stats.exposed_dp_us += gap;
      if (ot.wait == Wait::host) {
        stats.host_wait_us += gap;
        stats.compute_us += gap;
      }
    }
    stats.compute_us += duration(o);
    if (extra != 0) {
      stats.contention_us += extra;
      stats.compute_us += extra;
    }
  }

  // Where op j of instance i is written: the tail row for the last instance's own ops in a steady segment.
  OpTime& slot(int s, int i, int j) {
    SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    if (st.steady_from >= 0 && i == st.instances - 1 && !st.prefetched[static_cast<size_t>(j)])
      return st.tail[static_cast<size_t>(j)];
    const size_t need = (static_cast<size_t>(i) + 1) * static_cast<size_t>(st.ops);
    if (st.rows.size() < need) st.rows.resize(need);
    return st.rows[static_cast<size_t>(i) * static_cast<size_t>(st.ops) + static_cast<size_t>(j)];
  }

  // Schedules op j of instance (s, i). `bound`: earliest start of a prefetched op (its issuing unit's first compute
  // start). `stats`: the unit it belongs to, for compute accounting (null for prefetched ops).
  // (Inlined into its two callers: it runs for every op of every simulated unit, and the call and its register saves
  // were an eighth of its instructions.)
  [[gnu::always_inline]] void process(int s, int i, int j, double bound, double* free, InstanceStats& unit, bool own,
                                      bool& first_compute) {
    const TemplateOp& o = ops_[static_cast<size_t>(s)][static_cast<size_t>(j)];
    current_seg_ = s;
    const SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    double t = free[static_cast<int>(o.stream)];
    Wait w = Wait::stream;
    if (!o.deps.empty()) {
      // Before the segment is steady, its rows hold every instance simulated so far (SegmentTimes::time()'s first
      // case), this one's earlier ops included.
      const OpTime* row =
          st.steady_from < 0 ? st.rows.data() + static_cast<size_t>(i) * static_cast<size_t>(st.ops) : nullptr;
      for (int d : o.deps) {
        const double end = row ? row[d].end : st.time(i, d).end;
        if (end > t) {
          t = end;
          w = wait_of(ops_[static_cast<size_t>(s)][static_cast<size_t>(d)].stream);
        }
      }
    }
    double outside = 0;
    Wait ow = Wait::none;
    if (!o.ext.empty()) {
      for (size_t e = 0; e < o.ext.size(); ++e) {
        Resolved r = resolve(o, e, s, i);
        if (!r.found) continue;
        if (r.periodic) {
          if (r.end > t) {
            t = r.end;
            w = wait_of(r.stream);
          }
        } else if (r.end > outside) {
          outside = r.end;
          ow = wait_of(r.stream);
        }
      }
    }
    wait_for_issue(o, bound, t, w);
    if (outside > t) {
      t = outside;
      w = ow;
      unit.held_by_outside = true;
    }
    double extra = 0;
    OpTime ot{t, finish(o, t, extra), w};
    if (own || is_serialized_comm(o)) account(o, ot, extra, free, unit, first_compute);
    free[static_cast<int>(o.stream)] = ot.end;
    compute_free_ = free[0];
    slot(s, i, j) = ot;
  }

  void issue_prefetched(Slot next, double bound, double* free, InstanceStats* unit) {
    InstanceStats scratch;
    bool unused = false;
    for (int j : pf_[static_cast<size_t>(next.seg)])
      process(next.seg, next.inst, j, bound, free, unit ? *unit : scratch, false, unused);
  }

  // One unit: the own ops of instance (s, k), issuing the next instance's prefetched all-gathers after its first
  // compute op.
  void run_unit(int s, int k, double* free, InstanceStats& stats) {
    const double compute_before = free[0];
    bool first_compute = true;
    const Slot next = next_instance(s, k);
    auto issue = [&] {
      if (next.seg >= 0) issue_prefetched(next, first_compute ? 0 : stats.first_compute_start, free, &stats);
    };
    const std::vector<int>& own = own_[static_cast<size_t>(s)];
    if (own.empty()) issue();
    for (size_t x = 0; x < own.size(); ++x) {
      process(s, k, own[x], 0, free, stats, true, first_compute);
      if (static_cast<int>(x) == insert_after_[static_cast<size_t>(s)]) issue();
    }
    stats.span_us = free[0] - compute_before;
  }

  // The stream free times after unit u of segment s (from the steady extrapolation).
  void end_state(int s, int u, double* free) const {
    const SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    const std::vector<int>& own = own_[static_cast<size_t>(s)];
    const Slot next = next_instance(s, u);
    bool seen[kStreams] = {};
    auto visit = [&](int seg, int inst, int j) {
      const int k = static_cast<int>(ops_[static_cast<size_t>(seg)][static_cast<size_t>(j)].stream);
      if (seen[k]) return;
      seen[k] = true;
      free[k] = (*times_)[static_cast<size_t>(seg)].time(inst, j).end;
    };
    // Unit order reversed: own ops after the insertion point, the issued ops, own ops up to the insertion point.
    const int ins = insert_after_[static_cast<size_t>(s)];
    for (int x = static_cast<int>(own.size()) - 1; x > ins; --x) visit(s, u, own[static_cast<size_t>(x)]);
    if (next.seg >= 0) {
      const std::vector<int>& pf = pf_[static_cast<size_t>(next.seg)];
      for (auto it = pf.rbegin(); it != pf.rend(); ++it) visit(next.seg, next.inst, *it);
    }
    for (int x = ins; x >= 0; --x) visit(s, u, own[static_cast<size_t>(x)]);
    (void)st;
  }

  // After unit k of segment s: if it is unit k-1 shifted (own ops of instances k and k-1, the prefetched ops they
  // issued for k+1 and k), neither was held back by values from outside the segment, and every outside value of the
  // later units is ready by their shifted starts, mark the segment steady from k and return -1. Otherwise return the
  // next unit worth checking.
  int try_steady(int s, int k) {
    SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    const int n = st.ops;
    const std::vector<int>& own = own_[static_cast<size_t>(s)];
    const std::vector<int>& pf = pf_[static_cast<size_t>(s)];
    if (st.stats[static_cast<size_t>(k)].held_by_outside || st.stats[static_cast<size_t>(k - 1)].held_by_outside)
      return k + 1;
    auto at = [&](int i, int j) -> const OpTime& {
      return st.rows[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)];
    };
    const double P =
        own.empty() ? at(k + 1, pf[0]).start - at(k, pf[0]).start : at(k, own[0]).start - at(k - 1, own[0]).start;
    for (int j : own)
      if (std::abs((at(k, j).start - at(k - 1, j).start) - P) > kTol ||
          std::abs((at(k, j).end - at(k - 1, j).end) - P) > kTol || at(k, j).wait != at(k - 1, j).wait)
        return k + 1;
    for (int j : pf)
      if (std::abs((at(k + 1, j).start - at(k, j).start) - P) > kTol ||
          std::abs((at(k + 1, j).end - at(k, j).end) - P) > kTol || at(k + 1, j).wait != at(k, j).wait)
        return k + 1;
    // The host issues a unit in unit_dispatch(s): a period shorter than that lets the host fall behind unit by unit
    // until it holds the GPU back, which the shifted units would not show. It is ahead of the GPU by its lead after
    // unit k (host_: the time it issued unit k's last op) and loses D - P per unit, so the shifted copies hold while
    // it still issues every op of the last extrapolated unit before that unit's first op starts on the GPU:
    // host_ + (R-2-k) D <= (first start of unit k) + (R-2-k) P, with D an upper bound of any op's issue offset
    // inside its unit. (A short segment after long ones, e.g. 405B's per-block ops after the attention, has ms of
    // lead.)
    const double D = unit_dispatch(s);
    if (P + kTol < D) {
      double first = std::numeric_limits<double>::infinity();
      for (int j : own) first = std::min(first, at(k, j).start);
      for (int j : pf) first = std::min(first, at(k + 1, j).start - P);
      const double units = st.instances - 2 - k;
      if (host_ + units * D > first + units * P - kTol) return k + 1;
    }
    // A collective of another segment running beside units k-1 .. R-2 slows them alike only when it runs through all
    // of them (started before unit k-1, ends after unit R-2: FSDP's reduce-scatters of the backward beside 405B's
    // short per-block segment); one that starts or ends among them slows some units and not others.
    const double unit_start = own.empty() ? at(k, pf[0]).start : at(k - 1, own[0]).start;
    double window_end = 0;
    const double shift = (st.instances - 2 - k) * P;
    for (int j : own) window_end = std::max(window_end, at(k, j).end + shift);
    for (int j : pf) window_end = std::max(window_end, at(k + 1, j).end + shift - P);
    for (const Busy& b : running_)
      if (b.seg != s && b.end > unit_start + kTol && (b.start > unit_start + kTol || b.end < window_end + kTol))
        return k + 1;
    // Tentatively extrapolate, then check the outside values of units k+1 .. R-2 (own ops of their instance, and the
    // prefetched ops they issue for the next): first against an upper bound of what any instance could read
    // (cheap, and enough when the writers are long done), else one by one.
    st.steady_from = k;
    st.period_us = P;
    st.tail.assign(static_cast<size_t>(n), OpTime{});
    const int last = st.instances - 2;
    auto check = [&](int j, int first_inst, int last_inst) {
      const TemplateOp& o = ops_[static_cast<size_t>(s)][static_cast<size_t>(j)];
      if (o.ext.empty()) return -1;
      double bound = 0;
      for (TensorId x : o.ext) bound = std::max(bound, outside_bound(s, x));
      if (bound <= st.time(first_inst, j).start + kTol) return -1;
      for (int m = first_inst; m <= last_inst; ++m) {
        const double start = st.time(m, j).start;
        for (size_t e = 0; e < o.ext.size(); ++e) {
          Resolved r = resolve(o, e, s, m);
          if (r.found && !r.periodic && r.end > start + kTol) return m;
        }
      }
      return -1;
    };
    int fail = -1;
    for (int j : own) {
      int m = check(j, k + 1, last);
      if (m >= 0) fail = fail < 0 ? m : std::min(fail, m);
    }
    for (int j : pf) {
      int m = check(j, k + 2, last + 1);
      if (m >= 0) fail = fail < 0 ? m - 1 : std::min(fail, m - 1);  // issued by unit m-1
    }
    if (fail >= 0) {
      st.steady_from = -1;
      st.period_us = 0;
      st.tail.clear();
      return std::max(fail, k + 1);
    }
    return -1;
  }

  // Host time to issue one unit of segment s: its own ops and the next instance's prefetched all-gathers.
  double unit_dispatch(int s) const {
    double d = 0;
    for (int j : own_[static_cast<size_t>(s)]) d += dispatch_[flow_.op_index(s, j)];
    for (int j : pf_[static_cast<size_t>(s)]) d += dispatch_[flow_.op_index(s, j)];
    return d;
  }

  // After units k+1 .. u of segment s were extrapolated: the host has issued them too, and their collectives may still
  // run beside the next compute ops.
  void extrapolated_host_and_running(int s, int k, int u, const double* free) {
    host_ += (u - k) * unit_dispatch(s);
    compute_free_ = free[0];
    const SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    const std::vector<int>& own = busy_own_[static_cast<size_t>(s)];
    const std::vector<int>& pf = busy_pf_[static_cast<size_t>(s)];
    if (own.empty() && pf.empty()) return;
    // Only the collectives that slow compute (busy_own_, busy_pf_: fixed per segment), and only the units whose
    // collectives still run at compute_free_: an op's end in the extrapolated units is its steady row's end plus
    // (m - ref) x period, non-decreasing in m, so those units are the last ones; found from the end, then remembered
    // in unit order as a loop over every unit would (the order in which stretched_end() sums the slowdowns).
    auto live = [&](int m) {
      for (int j : own)
        if (st.time(m, j).end > compute_free_) return true;
      for (int j : pf)
        if (st.time(m + 1, j).end > compute_free_) return true;
      return false;
    };
    int first = u + 1;
    if (st.period_us >= 0) {
      while (first > k + 1 && live(first - 1)) --first;
    } else {
      first = k + 1;
    }
    auto add = [&](int inst, int j) {
      const OpTime t = st.time(inst, j);
      if (t.end > compute_free_)
        remember(Busy{t.start, t.end, ops_[static_cast<size_t>(s)][static_cast<size_t>(j)].contention, s});
    };
    for (int m = first; m <= u; ++m) {
      for (int j : own) add(m, j);
      for (int j : pf) add(m + 1, j);
    }
  }

  // An upper bound of the time at which any instance of segment s finds the outside value of template tensor x
  // ready: the latest end of any op of an earlier segment (or pinned instance of s) that writes a flat tensor x can
  // alias. Writers of s itself at a constant instance offset are periodic and not outside.
  double outside_bound(int s, TensorId x) const {
    double bound = 0;
    flow_.outside_writers(x, s, [&](int seg, int inst, int op) {
      bound = std::max(bound, (*times_)[static_cast<size_t>(seg)].time(inst, op).end);
    });
    return bound;
  }

  void finish(Timeline& tl, const double* free) const {
    tl.step_time_us = *std::max_element(free, free + kStreams);
    tl.exposed_tp_us += before_first_.exposed_tp_us;
    tl.exposed_dp_us += before_first_.exposed_dp_us;
    for (size_t s = 0; s < tl.segments.size(); ++s) {
      const SegmentTimes& st = tl.segments[s];
      if (st.ops == 0) continue;
      for (int i = 0; i < st.instances; ++i) {
        const InstanceStats& x = st.instance_stats(i);
        tl.compute_us += x.compute_us;
        tl.exposed_tp_us += x.exposed_tp_us;
        tl.exposed_dp_us += x.exposed_dp_us;
      }
      for (const TemplateOp& o : ops_[s]) tl.busy_us[static_cast<int>(o.label)] += duration(o) * st.instances;
      for (int i = 0; i < st.instances; ++i) {
        const InstanceStats& x = st.instance_stats(i);
        tl.contention_us += x.contention_us;
        tl.host_wait_us += x.host_wait_us;
      }
    }
    tl.busy_us[static_cast<int>(Stream::compute)] += tl.contention_us;
    // Communication still running after the last compute op is exposed too.
    double tail = tl.step_time_us - free[0];
    if (tail > 0)
      (std::max(free[2], free[3]) >= std::max(free[1], free[4]) ? tl.exposed_dp_us : tl.exposed_tp_us) += tail;
  }
};

}  // namespace

namespace {

// A Program scheduled on a structure built for it alone: the steady-state schedule (run()) or every instance
// (run_expanded()).
Timeline schedule_alone(const Program& p, const OpCosts& costs, const CostParams& c, bool expanded) {
  ScheduleStructure st;
  st.build(p, c, false);
  Scheduler s(p, costs, c, st);
  Timeline tl = expanded ? s.run_expanded() : s.run();
  tl.comm_overlaps_compute = c.comm_overlaps_compute != 0;
  return tl;
}

}  // namespace

Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c) {
  return schedule_alone(p, costs, c, false);
}

Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c, ScheduleCache& cache) {
  std::vector<int64_t>& words = cache.words_;
  words.clear();
  uint64_t hash = ScheduleStructure::kHashBasis;
  ScheduleStructure::structure_words(p, c, [&](int64_t x) {
    words.push_back(x);
    hash = ScheduleStructure::hash_word(hash, x);
  });
  auto& kept = cache.kept_;
  auto found = std::find_if(kept.begin(), kept.end(), [&](const std::unique_ptr<ScheduleStructure>& k) {
    return k->hash == hash && k->words == words;
  });
  if (found != kept.end()) {
    ++cache.hits;
    std::rotate(kept.begin(), found, found + 1);  // (used last: first)
  } else {
    // A new structure, or the one used longest ago rebuilt (its buffers reused).
    std::unique_ptr<ScheduleStructure> st;
    if (kept.size() >= ScheduleCache::kMaxKept) {
      st = std::move(kept.back());
      kept.pop_back();
    } else {
      st = std::make_unique<ScheduleStructure>();
    }
    st->words.swap(words);  // (words_ keeps the old buffer, for the next call)
    st->hash = hash;
    st->build_from_words(p, c, true);  // (a half-built structure is dropped when it throws)
    kept.insert(kept.begin(), std::move(st));
    ++cache.misses;
  }
  Scheduler s(p, costs, c, *kept.front());
  Timeline tl = s.run();
  tl.comm_overlaps_compute = c.comm_overlaps_compute != 0;
  return tl;
}

Timeline schedule_expanded(const Program& p, const OpCosts& costs, const CostParams& c) {
  return schedule_alone(p, costs, c, true);
}

}  // namespace tptune
