#pragma once
// expand()'s dataflow, answered per segment template without expanding the layers (internal to sim/, used by the
// scheduler).
//
// expand() (plans/program/program.h) gives every op the last writer, before its segment instance, of each input and
// output that has no earlier writer inside the instance; layer chains alias a layer's input to the previous layer's
// output (the first layer's to the chain's source, the last layer's output to its sink). Dataflow answers the same
// question for instance `inst` of segment `seg` from the templates alone: which (segment, instance, op) wrote that
// flat tensor last. It also says whether that writer is `periodic` (the same segment, a constant number of
// instances earlier: a steady state shifts it along), and gives the writers that may bound an outside value over
// all instances, so that the scheduler can check a steady state cheaply.

#include <span>
#include <vector>

#include "plans/program/program.h"

namespace tptune {

struct Writer {
  int seg = -1, inst = -1, op = -1;
  bool periodic = false;
  bool found() const { return seg >= 0; }
};

class Dataflow {
 public:
  explicit Dataflow(const Program& p);

  int instances(int seg) const { return instances_[static_cast<size_t>(seg)]; }
  // The layer of an instance (-1 outside block segments).
  int layer(int seg, int inst) const;
  // The tensors op `op` of segment `seg` reads or writes with no earlier writer in its instance, less those that
  // last_writer() finds no writer of at any instance (the scheduler need not look them up): a tensor no op before
  // the segment writes, and a block's own output that only the same op of each instance writes.
  std::span<const TensorId> outside(int seg, int op) const {
    const size_t g = op_base_[static_cast<size_t>(seg)] + static_cast<size_t>(op);
    return {outside_.data() + outside_begin_[g], outside_.data() + outside_begin_[g + 1]};
  }
  // Op `op` of segment `seg` numbered over the Program (0 .. op_count()), and the position of its outside() tensors
  // among every op's (0 .. outside_count()): indices for per-op and per-value tables.
  size_t op_index(int seg, int op) const { return op_base_[static_cast<size_t>(seg)] + static_cast<size_t>(op); }
  size_t op_count() const { return op_base_.back(); }
  size_t outside_offset(int seg, int op) const { return static_cast<size_t>(outside_begin_[op_index(seg, op)]); }
  size_t outside_count() const { return outside_.size(); }
  // The last writer of template tensor t, as instance `inst` of segment `seg` sees it.
  Writer last_writer(TensorId t, int seg, int inst) const;
  // Calls f(seg', inst', op') for every op that may be the non-periodic last writer of t for some instance of
  // segment `seg`, at its latest instance (so the latest end of these bounds the value's ready time).
  template <class F>
  void outside_writers(TensorId t, int seg, F&& f) const;

 private:
  struct Key {  // a flat tensor: a template tensor and a layer (-1 for global tensors), after chain aliasing
    TensorId t = -1;
    int layer = -1;
  };
  struct Site {  // a template op that writes some flat tensor, and for which layers
    enum class Mode : unsigned char {
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

  std::vector<LayerChain>
      chains_;  // the Program's (a copy: a Dataflow may outlive it, sim/timeline/timeline.cc's cache)
  int L_ = 0;
  std::vector<int> chain_in_, chain_sink_;
  // Flat (compressed rows: one allocation each, however many tensors and ops; the search builds a Dataflow per
  // candidate it schedules). sites_[site_begin_[t] .. site_begin_[t+1]): the sites of key tensor t, in program order.
  // outside_[outside_begin_[g] .. outside_begin_[g+1]): outside(seg, op) for the op numbered g = op_base_[seg] + op.
  std::vector<Site> sites_;
  std::vector<int> site_begin_;
  std::vector<TensorId> outside_;
  std::vector<int> outside_begin_;
  std::vector<size_t> op_base_;
  std::span<const Site> sites(TensorId t) const {
    return {sites_.data() + site_begin_[static_cast<size_t>(t)],
            sites_.data() + site_begin_[static_cast<size_t>(t) + 1]};
  }
  std::vector<int> instances_;
  std::vector<char> per_layer_, reverse_;  // by segment
  // By segment: instance i runs layer `layer_at_0 + layer_step * i` (layer_step -1 when reverse; instance_layer()),
  // precomputed because the lookups below run for every outside value of every scheduled op.
  struct Layers {
    int layer_at_0 = 0, layer_step = 1;
  };
  std::vector<Layers> layers_;
  std::vector<char> tensor_per_layer_;  // by tensor (TensorDesc::per_layer, read on every lookup)

  const LayerChain& chain(int i) const { return chains_[static_cast<size_t>(i)]; }
  int first_layer(const LayerChain& c) const { return c.reverse ? L_ - 1 : 0; }
  int last_layer(const LayerChain& c) const { return c.reverse ? 0 : L_ - 1; }
  int prev_layer(const LayerChain& c, int l) const { return c.reverse ? l + 1 : l - 1; }
  int next_layer(const LayerChain& c, int l) const { return c.reverse ? l - 1 : l + 1; }
  // The instance of segment `seg` running layer `layer`; -1 when the segment does not cover it (a split block
  // backward, Segment::first_layer).
  int instance_of(int seg, int layer) const {
    const auto s = static_cast<size_t>(seg);
    const Layers& l = layers_[s];
    const int i = (layer - l.layer_at_0) * l.layer_step;
    return static_cast<unsigned>(i) < static_cast<unsigned>(instances_[s]) ? i : -1;
  }
  Key key(TensorId t, int l, int depth = 0) const;
  // False when last_writer(x, seg, inst) finds no writer at any instance; true when it may (or when x aliases through
  // chains further than this follows).
  bool may_have_writer(TensorId x, int seg) const;
  // Appends the sites op `op` of segment `seg` writing tensor u adds, with their key tensors, to `out`.
  void add_sites(int seg, int op, TensorId u, std::vector<std::pair<TensorId, Site>>& out) const;
};

template <class F>
void Dataflow::outside_writers(TensorId x, int s, F&& f) const {
  TensorId keys[2] = {-1, -1};
  const bool per_layer = tensor_per_layer_[static_cast<size_t>(x)];
  int c = chain_in_[static_cast<size_t>(x)];
  if (per_layer && c >= 0) {
    keys[0] = key(chain(c).out, 0).t;
    keys[1] = key(chain(c).source, -1).t;
  } else {
    keys[0] = key(x, per_layer ? 0 : -1).t;
  }
  for (TensorId kt : keys) {
    if (kt < 0) continue;
    for (const Site& site : sites(kt)) {
      if (site.seg > s) break;
      if (site.mode == Site::Mode::at_layer) {
        const int inst = instance_of(site.seg, site.layer);
        if (inst >= 0) f(site.seg, inst, site.op);
      } else if (site.seg != s)  // writers of s itself at a constant offset are periodic
        f(site.seg, instances_[static_cast<size_t>(site.seg)] - 1, site.op);  // the latest instance ends last
    }
  }
}

}  // namespace tptune
