#include "sim/timeline/dataflow.h"

#include <algorithm>

#include "plans/util/error.h"
#include "sim/timeline/timeline.h"

namespace tptune {

Dataflow::Dataflow(const Program& p) : chains_(p.chains) {
  L_ = static_cast<int>(p.model.n_layers);
  const size_t nt = p.tensors.size();
  chain_in_.assign(nt, -1);
  chain_sink_.assign(nt, -1);
  tensor_per_layer_.resize(nt);
  for (size_t t = 0; t < nt; ++t) tensor_per_layer_[t] = p.tensors[t].per_layer;
  for (size_t i = 0; i < p.chains.size(); ++i) {
    chain_in_[static_cast<size_t>(p.chains[i].in)] = static_cast<int>(i);
    chain_sink_[static_cast<size_t>(p.chains[i].sink)] = static_cast<int>(i);
  }
  const size_t ns = p.segments.size();
  instances_.resize(ns);
  per_layer_.resize(ns);
  reverse_.resize(ns);
  layers_.resize(ns);
  op_base_.resize(ns + 1, 0);
  for (size_t s = 0; s < ns; ++s) {
    per_layer_[s] = is_per_layer_segment(p.segments[s]);
    reverse_[s] = p.segments[s].reverse;
    instances_[s] = segment_instances(p, p.segments[s]);
    if (per_layer_[s]) {
      const int first = p.segments[s].first_layer;
      layers_[s] = reverse_[s] ? Layers{first + instances_[s] - 1, -1} : Layers{first, 1};
    }
    op_base_[s + 1] = op_base_[s] + p.segments[s].ops.size();
  }
  outside_begin_.reserve(op_base_[ns] + 1);
  outside_begin_.push_back(0);
  outside_.reserve(2 * op_base_[ns]);
  // Scratch reused across calls on this thread (the search builds a Dataflow per candidate it schedules).
  thread_local std::vector<std::pair<TensorId, Site>> sites;  // (key tensor, site) in program order
  sites.clear();
  sites.reserve(2 * op_base_[ns]);
  thread_local std::vector<int> written;  // the segment that last wrote each tensor (first-writer test per segment)
  written.assign(nt, -1);
  for (size_t s = 0; s < ns; ++s) {
    const Segment& seg = p.segments[s];
    const int si = static_cast<int>(s);
    for (size_t j = 0; j < seg.ops.size(); ++j) {
      const Op& op = seg.ops[j];
      const size_t from = outside_.size();
      for (TensorId x : op.inputs)
        if (written[static_cast<size_t>(x)] != si) outside_.push_back(x);
      for (TensorId x : op.outputs)
        if (written[static_cast<size_t>(x)] != si &&
            std::find(outside_.begin() + static_cast<std::ptrdiff_t>(from), outside_.end(), x) == outside_.end())
          outside_.push_back(x);
      outside_begin_.push_back(static_cast<int>(outside_.size()));
      for (TensorId x : op.outputs) {
        written[static_cast<size_t>(x)] = si;
        add_sites(si, static_cast<int>(j), x, sites);
      }
    }
  }
  // Counting sort by key tensor, stable: each tensor's sites stay in program order.
  site_begin_.assign(nt + 1, 0);
  for (const auto& ks : sites) ++site_begin_[static_cast<size_t>(ks.first) + 1];
  for (size_t t = 0; t < nt; ++t) site_begin_[t + 1] += site_begin_[t];
  sites_.resize(sites.size());
  thread_local std::vector<int> fill;
  fill.assign(site_begin_.begin(), site_begin_.end() - 1);
  for (const auto& ks : sites) sites_[static_cast<size_t>(fill[static_cast<size_t>(ks.first)]++)] = ks.second;
  // Leave out the outside values that no instance finds a writer of (most of them: a block's own outputs, which only
  // the same op of the same instance writes), compacting outside_ in op order.
  size_t kept = 0;
  for (size_t s = 0; s < ns; ++s)
    for (size_t g = op_base_[s]; g < op_base_[s + 1]; ++g) {
      const auto from = static_cast<size_t>(outside_begin_[g]), to = static_cast<size_t>(outside_begin_[g + 1]);
      outside_begin_[g] = static_cast<int>(kept);
      for (size_t e = from; e < to; ++e)
        if (may_have_writer(outside_[e], static_cast<int>(s))) outside_[kept++] = outside_[e];
    }
  outside_begin_.back() = static_cast<int>(kept);
  outside_.resize(kept);
}

bool Dataflow::may_have_writer(TensorId x, int seg) const {
  // Whether some site of key tensor kt at or before `seg` may be found (sites are in program order); with `own_layer`
  // (the key's layer is the reading instance's), a same_layer site of `seg` itself is not: it is the reading
  // instance's own write (last_writer() skips a writer at or after the instance).
  auto written = [&](TensorId kt, bool own_layer) {
    for (const Site& site : sites(kt)) {
      if (site.seg > seg) break;
      if (site.seg < seg || !own_layer || site.mode != Site::Mode::same_layer) return true;
    }
    return false;
  };
  const auto t = static_cast<size_t>(x);
  if (!tensor_per_layer_[t]) return written(key(x, -1).t, false);  // the same key at every instance
  const int c = chain_in_[t];
  if (!per_layer_[static_cast<size_t>(seg)]) return written(x, false);  // key (x, -1)
  if (c < 0) return written(x, true);                                   // key (x, the instance's layer)
  // A chain input: the source at the chain's first layer, the chain's output of the previous layer at the others.
  const LayerChain& ch = chain(c);
  const auto out = static_cast<size_t>(ch.out);
  if (!tensor_per_layer_[out] || chain_in_[out] >= 0) return true;  // aliases further: kept
  return written(ch.out, false) || written(key(ch.source, -1).t, false);
}

int Dataflow::layer(int seg, int inst) const {  // instance_layer(), from the cached segment flags
  const auto s = static_cast<size_t>(seg);
  if (!per_layer_[s]) return -1;
  return layers_[s].layer_at_0 + layers_[s].layer_step * inst;
}

Dataflow::Key Dataflow::key(TensorId t, int l, int depth) const {
  if (depth > 8) throw Error("schedule: layer chains alias each other in a cycle");
  if (!tensor_per_layer_[static_cast<size_t>(t)]) {
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

void Dataflow::add_sites(int seg, int op, TensorId u, std::vector<std::pair<TensorId, Site>>& out) const {
  Site site;
  site.seg = seg;
  site.op = op;
  if (!tensor_per_layer_[static_cast<size_t>(u)] || !per_layer_[static_cast<size_t>(seg)]) {
    Key k = key(u, -1);
    site.mode = Site::Mode::every_instance;
    site.key_layer = k.layer;
    out.emplace_back(k.t, site);
    return;
  }
  int c = chain_in_[static_cast<size_t>(u)];
  if (c >= 0) {
    const LayerChain& ch = chain(c);
    site.mode = Site::Mode::chain_next;
    site.chain = c;
    out.emplace_back(ch.out, site);
    Key k = key(ch.source, -1);
    Site first = site;
    first.mode = Site::Mode::at_layer;
    first.key_layer = k.layer;
    first.layer = first_layer(ch);
    out.emplace_back(k.t, first);
    return;
  }
  site.mode = Site::Mode::same_layer;
  out.emplace_back(u, site);
}

Writer Dataflow::last_writer(TensorId t, int seg, int inst) const {
  const Key k = key(t, layer(seg, inst));
  Writer w;
  for (const Site& site : sites(k.t)) {
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
    if (site.seg > w.seg || (site.seg == w.seg && (wi > w.inst || (wi == w.inst && site.op > w.op)))) {
      w.seg = site.seg;
      w.inst = wi;
      w.op = site.op;
      w.periodic = site.seg == seg && site.mode != Site::Mode::at_layer;
    }
  }
  return w;
}

}  // namespace tptune
