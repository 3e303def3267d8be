#include "sim/timeline.h"

#include <algorithm>
#include <cmath>

#include "plans/error.h"
#include "sim/comm_cost.h"
#include "sim/compute_cost.h"

namespace tptune {

std::string_view to_string(Stream s) {
  switch (s) {
    case Stream::compute: return "compute";
    case Stream::tp: return "tp comm";
    case Stream::dp: return "dp comm";
  }
  return "?";
}

Stream stream_of(const Op& op) {
  if (auto* c = std::get_if<CollectiveOp>(&op.kind)) return c->group == Group::dp ? Stream::dp : Stream::tp;
  return Stream::compute;
}

bool is_per_layer_segment(const Segment& s) { return s.repeat > 1 || s.name.starts_with("block"); }

int instance_layer(const Program& p, const Segment& s, int i) {
  if (!is_per_layer_segment(s)) return -1;
  const int L = static_cast<int>(p.model.n_layers);
  return s.reverse ? L - 1 - i : i;
}

double op_duration_us(const Op& op, const Program& p, const ClusterSpec& cluster, const CostParams& c) {
  if (auto* col = std::get_if<CollectiveOp>(&op.kind)) {
    GroupLayout g = group_layout(cluster, col->group, p.tp, p.dp);
    return collective_cost(col->kind, col->bytes, g, cluster, c).time_us;
  }
  return compute_cost(op, p, cluster.gpu, c).time_us;
}

OpCosts cost_ops(const Program& p, const ClusterSpec& cluster, const CostParams& c) {
  OpCosts out;
  out.duration_us.reserve(p.segments.size());
  // Collective costs depend only on (kind, bytes, group); compute costs on the op. Ops repeat little inside a
  // segment, so no memo here: the search keeps whole OpCosts instead.
  for (const Segment& s : p.segments) {
    std::vector<double> d;
    d.reserve(s.ops.size());
    for (const Op& op : s.ops) d.push_back(op_duration_us(op, p, cluster, c));
    out.duration_us.push_back(std::move(d));
  }
  return out;
}

// ---- SegmentTimes ---------------------------------------------------------------------------------------------------

double SegmentTimes::shift(int instance) const {
  if (steady_from < 0 || instance < simulated_instances()) return 0;
  return (instance - steady_from) * period_us;
}

OpTime SegmentTimes::time(int instance, int op) const {
  int n = simulated_instances();
  if (instance < n) return simulated[static_cast<size_t>(instance) * ops + op];
  OpTime t = simulated[static_cast<size_t>(steady_from) * ops + op];
  double d = (instance - steady_from) * period_us;
  t.start += d;
  t.end += d;
  return t;
}

const InstanceStats& SegmentTimes::instance_stats(int instance) const {
  int n = static_cast<int>(stats.size());
  return instance < n ? stats[static_cast<size_t>(instance)] : stats[static_cast<size_t>(steady_from)];
}

namespace {

constexpr double kTol = 1e-6;  // us; times are sums of the same durations, so shifts agree far closer than this

Wait wait_of(Stream s) {
  switch (s) {
    case Stream::compute: return Wait::compute;
    case Stream::tp: return Wait::tp;
    case Stream::dp: return Wait::dp;
  }
  return Wait::none;
}

// A flat tensor of expand(): a template tensor and a layer (-1 for global tensors), after chain aliasing.
struct Key {
  TensorId t = -1;
  int layer = -1;
};

// A template op that writes some flat tensor, and for which layers.
struct Site {
  enum class Mode : uint8_t {
    every_instance,  // a global tensor: every instance of the segment writes the same flat tensor
    at_layer,        // writes the key only in the instance of layer `layer` (a chain input at its first layer)
    same_layer,      // a per-layer tensor: the instance of layer l writes (t, l)
    chain_next,      // a chain input: the instance of layer next(l) writes (chain.out, l)
  };
  int seg = 0, op = 0;
  Mode mode = Mode::every_instance;
  int key_layer = -1;  // every_instance / at_layer: the key's layer
  int layer = -1;      // at_layer: the writing instance's layer
  int chain = -1;      // chain_next
};

struct Resolved {
  bool found = false;
  bool periodic = false;  // written by the same segment at a constant instance offset
  double end = 0;
  Stream stream = Stream::compute;
};

struct TemplateOp {
  Stream stream = Stream::compute;
  double duration = 0;
  const std::vector<int>* deps = nullptr;
  std::vector<TensorId> ext;  // inputs and outputs with no earlier writer in the segment
};

class Scheduler {
 public:
  Scheduler(const Program& p, const OpCosts& costs, const CostParams& c) : p_(p), c_(c) {
    L_ = static_cast<int>(p.model.n_layers);
    const size_t nt = p.tensors.size();
    chain_in_.assign(nt, -1);
    chain_sink_.assign(nt, -1);
    for (size_t i = 0; i < p.chains.size(); ++i) {
      chain_in_[static_cast<size_t>(p.chains[i].in)] = static_cast<int>(i);
      chain_sink_[static_cast<size_t>(p.chains[i].sink)] = static_cast<int>(i);
    }
    sites_.resize(nt);
    const size_t ns = p.segments.size();
    ops_.resize(ns);
    instances_.resize(ns);
    per_layer_.resize(ns);
    for (size_t s = 0; s < ns; ++s) {
      const Segment& seg = p.segments[s];
      per_layer_[s] = is_per_layer_segment(seg);
      instances_[s] = per_layer_[s] ? L_ : 1;
      if (costs.duration_us.size() != ns || costs.duration_us[s].size() != seg.ops.size())
        throw Error("schedule: OpCosts do not match the Program");
      std::vector<char> written(nt, 0);
      for (size_t j = 0; j < seg.ops.size(); ++j) {
        const Op& op = seg.ops[j];
        TemplateOp t;
        t.stream = stream_of(op);
        t.duration = costs.duration_us[s][j];
        t.deps = &op.deps;
        for (TensorId x : op.inputs)
          if (!written[static_cast<size_t>(x)]) t.ext.push_back(x);
        for (TensorId x : op.outputs)
          if (!written[static_cast<size_t>(x)] && std::find(t.ext.begin(), t.ext.end(), x) == t.ext.end())
            t.ext.push_back(x);
        for (TensorId x : op.outputs) {
          written[static_cast<size_t>(x)] = 1;
          add_sites(static_cast<int>(s), static_cast<int>(j), x);
        }
        ops_[s].push_back(std::move(t));
      }
    }
  }

  // ---- the fast path -----------------------------------------------------------------------------------------------
  Timeline run() {
    Timeline tl;
    times_ = &tl.segments;
    tl.segments.resize(p_.segments.size());
    double free[kStreams] = {0, 0, 0};
    for (size_t s = 0; s < p_.segments.size(); ++s) {
      SegmentTimes& st = tl.segments[s];
      const int R = instances_[s];
      const int n = static_cast<int>(ops_[s].size());
      st.instances = R;
      st.ops = n;
      if (n == 0) continue;
      st.simulated.reserve(static_cast<size_t>(std::min(R, 4)) * n);
      int next_check = 1;
      for (int i = 0; i < R; ++i) {
        simulate_instance(static_cast<int>(s), i, free);
        if (i >= next_check && i + 1 < R) {
          int fail = try_steady(static_cast<int>(s), i);
          if (fail < 0) break;
          next_check = fail;
        }
      }
      if (st.steady_from >= 0) {
        // Streams end where the last instance's last op on them ends.
        for (int k = 0; k < kStreams; ++k) {
          for (int j = n - 1; j >= 0; --j) {
            if (static_cast<int>(ops_[s][static_cast<size_t>(j)].stream) != k) continue;
            free[k] = st.time(R - 1, j).end;
            break;
          }
        }
      }
    }
    finish(tl, free);
    return tl;
  }

  // ---- the reference: expand() and schedule every flat op ------------------------------------------------------------
  Timeline run_expanded() {
    Timeline tl;
    times_ = &tl.segments;
    tl.segments.resize(p_.segments.size());
    FlatProgram flat = expand(p_);
    std::vector<OpTime> ft(flat.ops.size());
    std::vector<Stream> fs(flat.ops.size());
    double free[kStreams] = {0, 0, 0};
    size_t idx = 0;
    for (size_t s = 0; s < p_.segments.size(); ++s) {
      SegmentTimes& st = tl.segments[s];
      const int R = instances_[s];
      const int n = static_cast<int>(ops_[s].size());
      st.instances = R;
      st.ops = n;
      if (n == 0) continue;
      for (int i = 0; i < R; ++i) {
        InstanceStats stats;
        const double compute_before = free[0];
        const double bound = prefetch_bound(static_cast<int>(s), i);
        bool first_compute = true;
        for (int j = 0; j < n; ++j, ++idx) {
          const TemplateOp& o = ops_[s][static_cast<size_t>(j)];
          const FlatOp& f = flat.ops[idx];
          if (f.op != &p_.segments[s].ops[static_cast<size_t>(j)])
            throw Error("schedule_expanded: expand() visited ops in an unexpected order");
          double t = free[static_cast<int>(o.stream)];
          Wait w = Wait::stream;
          for (int d : f.deps) {
            if (ft[static_cast<size_t>(d)].end > t) {
              t = ft[static_cast<size_t>(d)].end;
              w = wait_of(fs[static_cast<size_t>(d)]);
            }
          }
          if (o.stream == Stream::dp && bound > t) {
            t = bound;
            w = Wait::prefetch;
          }
          OpTime ot{t, t + o.duration, w};
          account(o, ot, free, stats, j == 0, first_compute);
          ft[idx] = ot;
          fs[idx] = o.stream;
          st.simulated.push_back(ot);
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
  const CostParams& c_;
  int L_ = 0;
  std::vector<int> chain_in_, chain_sink_;
  std::vector<std::vector<Site>> sites_;  // by the key's tensor
  std::vector<std::vector<TemplateOp>> ops_;
  std::vector<int> instances_;
  std::vector<char> per_layer_;
  std::vector<SegmentTimes>* times_ = nullptr;

  const LayerChain& chain(int i) const { return p_.chains[static_cast<size_t>(i)]; }
  int first_layer(const LayerChain& c) const { return c.reverse ? L_ - 1 : 0; }
  int last_layer(const LayerChain& c) const { return c.reverse ? 0 : L_ - 1; }
  int prev_layer(const LayerChain& c, int l) const { return c.reverse ? l + 1 : l - 1; }
  int next_layer(const LayerChain& c, int l) const { return c.reverse ? l - 1 : l + 1; }
  int instance_of(int seg, int layer) const {
    return p_.segments[static_cast<size_t>(seg)].reverse ? L_ - 1 - layer : layer;
  }

  // The flat tensor of template tensor t in layer l (expand()'s aliasing).
  Key key(TensorId t, int l, int depth = 0) const {
    if (depth > 8) throw Error("schedule: layer chains alias each other in a cycle");
    const TensorDesc& d = p_.tensor(t);
    if (!d.per_layer) {
      int c = chain_sink_[static_cast<size_t>(t)];
      if (c >= 0) return key(chain(c).out, last_layer(chain(c)), depth + 1);
      return {t, -1};
    }
    int c = chain_in_[static_cast<size_t>(t)];
    if (c >= 0 && l >= 0) {
      const LayerChain& ch = chain(c);
      if (l == first_layer(ch)) return key(ch.source, -1, depth + 1);
      return key(ch.out, prev_layer(ch, l), depth + 1);
    }
    return {t, l};
  }

  void add_sites(int seg, int op, TensorId u) {
    const TensorDesc& d = p_.tensor(u);
    Site site;
    site.seg = seg;
    site.op = op;
    if (!d.per_layer || !per_layer_[static_cast<size_t>(seg)]) {
      Key k = key(u, -1);
      site.mode = Site::Mode::every_instance;
      site.key_layer = k.layer;
      sites_[static_cast<size_t>(k.t)].push_back(site);
      return;
    }
    int c = chain_in_[static_cast<size_t>(u)];
    if (c >= 0) {
      const LayerChain& ch = chain(c);
      site.mode = Site::Mode::chain_next;
      site.chain = c;
      sites_[static_cast<size_t>(ch.out)].push_back(site);
      Key k = key(ch.source, -1);
      Site first = site;
      first.mode = Site::Mode::at_layer;
      first.key_layer = k.layer;
      first.layer = first_layer(ch);
      sites_[static_cast<size_t>(k.t)].push_back(first);
      return;
    }
    site.mode = Site::Mode::same_layer;
    sites_[static_cast<size_t>(u)].push_back(site);
  }

  // The last writer of flat tensor k before instance (seg, inst).
  Resolved resolve(Key k, int seg, int inst) const {
    Resolved r;
    int bs = -1, bi = -1, bo = -1;
    bool periodic = false;
    for (const Site& site : sites_[static_cast<size_t>(k.t)]) {
      if (site.seg > seg) break;  // sites are in program order
      int wi = -1;
      switch (site.mode) {
        case Site::Mode::every_instance:
          if (site.key_layer != k.layer) continue;
          wi = site.seg < seg ? instances_[static_cast<size_t>(site.seg)] - 1 : inst - 1;
          break;
        case Site::Mode::at_layer:
          if (site.key_layer != k.layer) continue;
          wi = instance_of(site.seg, site.layer);
          break;
        case Site::Mode::same_layer:
          if (k.layer < 0) continue;
          wi = instance_of(site.seg, k.layer);
          break;
        case Site::Mode::chain_next: {
          if (k.layer < 0) continue;
          int l = next_layer(chain(site.chain), k.layer);
          if (l < 0 || l >= L_) continue;
          wi = instance_of(site.seg, l);
          break;
        }
      }
      if (wi < 0 || (site.seg == seg && wi >= inst)) continue;
      if (site.seg > bs || (site.seg == bs && (wi > bi || (wi == bi && site.op > bo)))) {
        bs = site.seg;
        bi = wi;
        bo = site.op;
        periodic = site.seg == seg && site.mode != Site::Mode::at_layer;
      }
    }
    if (bs < 0) return r;
    r.found = true;
    r.periodic = periodic;
    r.end = (*times_)[static_cast<size_t>(bs)].time(bi, bo).end;
    r.stream = ops_[static_cast<size_t>(bs)][static_cast<size_t>(bo)].stream;
    return r;
  }

  // First compute start of an instance (shifted for extrapolated ones).
  double first_compute_start(int seg, int inst) const {
    const SegmentTimes& st = (*times_)[static_cast<size_t>(seg)];
    return st.instance_stats(inst).first_compute_start + st.shift(inst);
  }

  // The earliest start of a DP collective in (seg, inst): the instance dp_prefetch_depth instances earlier (in
  // program order, skipping empty segments) must have started computing.
  double prefetch_bound(int seg, int inst) const {
    int depth = std::max(1, c_.dp_prefetch_depth);
    int s = seg, i = inst;
    while (depth > 0) {
      --i;
      while (i < 0) {
        if (--s < 0) return 0;
        i = ops_[static_cast<size_t>(s)].empty() ? -1 : instances_[static_cast<size_t>(s)] - 1;
      }
      --depth;
    }
    return first_compute_start(s, i);
  }

  void account(const TemplateOp& o, const OpTime& ot, double* free, InstanceStats& stats, bool first_op,
               bool& first_compute) const {
    if (first_op) {
      stats.first_start = ot.start;
      stats.first_compute_start = ot.start;
    }
    if (o.stream == Stream::compute) {
      if (first_compute) {
        stats.first_compute_start = ot.start;
        first_compute = false;
      }
      double gap = ot.start - free[0];
      if (gap > 0) {
        if (ot.wait == Wait::tp) stats.exposed_tp_us += gap;
        if (ot.wait == Wait::dp || ot.wait == Wait::prefetch) stats.exposed_dp_us += gap;
      }
      stats.compute_us += o.duration;
    }
    free[static_cast<int>(o.stream)] = ot.end;
  }

  void simulate_instance(int s, int i, double* free) {
    SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    const std::vector<TemplateOp>& ops = ops_[static_cast<size_t>(s)];
    const int layer = per_layer_[static_cast<size_t>(s)] ? instance_layer(p_, p_.segments[static_cast<size_t>(s)], i) : -1;
    const size_t base = st.simulated.size();
    st.simulated.resize(base + ops.size());
    OpTime* cur = st.simulated.data() + base;
    InstanceStats stats;
    const double compute_before = free[0];
    double bound = -1;
    bool first_compute = true;
    for (size_t j = 0; j < ops.size(); ++j) {
      const TemplateOp& o = ops[j];
      double t = free[static_cast<int>(o.stream)];
      Wait w = Wait::stream;
      for (int d : *o.deps) {
        const OpTime& dt = cur[d];
        if (dt.end > t) {
          t = dt.end;
          w = wait_of(ops[static_cast<size_t>(d)].stream);
        }
      }
      double outside = 0;
      Wait ow = Wait::none;
      for (TensorId x : o.ext) {
        Resolved r = resolve(key(x, layer), s, i);
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
      if (o.stream == Stream::dp) {
        if (bound < 0) bound = prefetch_bound(s, i);
        if (bound > t) {
          t = bound;
          w = Wait::prefetch;
        }
      }
      if (outside > t) {
        t = outside;
        w = ow;
        stats.held_by_outside = true;
      }
      cur[j] = OpTime{t, t + o.duration, w};
      account(o, cur[j], free, stats, j == 0, first_compute);
    }
    stats.span_us = free[0] - compute_before;
    st.stats.push_back(stats);
  }

  // After simulating instance i of segment s: if it is instance i-1 shifted (and neither was held back by values
  // from outside the segment), and every outside value of the later instances is ready by their shifted starts,
  // mark the segment steady from i and return -1. Otherwise return the next instance worth checking.
  int try_steady(int s, int i) {
    SegmentTimes& st = (*times_)[static_cast<size_t>(s)];
    const int n = st.ops;
    const int depth = std::max(1, c_.dp_prefetch_depth);
    if (i < depth) return depth;
    const OpTime* a = &st.simulated[static_cast<size_t>(i - 1) * n];
    const OpTime* b = &st.simulated[static_cast<size_t>(i) * n];
    const double P = b[0].start - a[0].start;
    for (int k = 0; k < depth; ++k) {
      const OpTime* x = &st.simulated[static_cast<size_t>(i - 1 - k) * n];
      const OpTime* y = &st.simulated[static_cast<size_t>(i - k) * n];
      for (int j = 0; j < n; ++j)
        if (std::abs((y[j].start - x[j].start) - P) > kTol || y[j].wait != x[j].wait) return i + 1;
      if (st.stats[static_cast<size_t>(i - k)].held_by_outside) return i + 1;
    }
    if (st.stats[static_cast<size_t>(i - depth)].held_by_outside) return i + 1;
    // Tentatively extrapolate, then check the outside values of every later instance.
    st.steady_from = i;
    st.period_us = P;
    const std::vector<TemplateOp>& ops = ops_[static_cast<size_t>(s)];
    const Segment& seg = p_.segments[static_cast<size_t>(s)];
    for (int m = i + 1; m < st.instances; ++m) {
      const int layer = instance_layer(p_, seg, m);
      for (int j = 0; j < n; ++j) {
        const TemplateOp& o = ops[static_cast<size_t>(j)];
        if (o.ext.empty()) continue;
        double start = st.time(m, j).start;
        for (TensorId x : o.ext) {
          Resolved r = resolve(key(x, layer), s, m);
          if (r.found && !r.periodic && r.end > start + kTol) {
            st.steady_from = -1;
            st.period_us = 0;
            return m;
          }
        }
      }
    }
    return -1;
  }

  void finish(Timeline& tl, const double* free) const {
    tl.step_time_us = std::max({free[0], free[1], free[2]});
    for (size_t s = 0; s < tl.segments.size(); ++s) {
      const SegmentTimes& st = tl.segments[s];
      if (st.ops == 0) continue;
      for (int i = 0; i < st.instances; ++i) {
        const InstanceStats& x = st.instance_stats(i);
        tl.compute_us += x.compute_us;
        tl.exposed_tp_us += x.exposed_tp_us;
        tl.exposed_dp_us += x.exposed_dp_us;
      }
      for (const TemplateOp& o : ops_[s]) tl.busy_us[static_cast<int>(o.stream)] += o.duration * st.instances;
    }
    // Communication still running after the last compute op is exposed too.
    double tail = tl.step_time_us - free[0];
    if (tail > 0) (free[2] >= free[1] ? tl.exposed_dp_us : tl.exposed_tp_us) += tail;
  }
};

}  // namespace

Timeline schedule(const Program& p, const OpCosts& costs, const CostParams& c) {
  Scheduler s(p, costs, c);
  return s.run();
}

Timeline schedule_expanded(const Program& p, const OpCosts& costs, const CostParams& c) {
  Scheduler s(p, costs, c);
  return s.run_expanded();
}

}  // namespace tptune
