#pragma once
// A hand-built Program for timeline and simulator tests: tensors of one element, segments and ops added in order,
// op durations set by the test (OpCosts), so that every expected time can be worked out by hand.

#include <string>
#include <utility>
#include <vector>

#include "plans/program/program.h"

namespace tptune::test {

struct ProgramBuilder {
  Program p;
  explicit ProgramBuilder(int layers = 1) { p.model.n_layers = layers; }
  TensorId tensor(const std::string& name, bool per_layer = false) {
    TensorDesc d;
    d.name = name;
    d.per_layer = per_layer;
    d.local_shape = d.global_shape = {1};
    p.tensors.push_back(d);
    return static_cast<TensorId>(p.tensors.size() - 1);
  }
  Segment& segment(SegmentKind kind, int repeat = 1) {
    p.segments.push_back(Segment{kind, repeat, false, {}});
    return p.segments.back();
  }
  // Appends to the last segment; `deps` are ops of the same segment instance (across segments, the tensors' last
  // writers link ops). Returns the op's index in its segment.
  int op(const std::string& name, OpKind kind, std::vector<TensorId> in, std::vector<TensorId> out,
         std::vector<int> deps = {}) {
    Segment& s = p.segments.back();
    Op o;
    o.id = static_cast<int>(s.ops.size());
    o.name = o.module = name;
    o.kind = std::move(kind);
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.deps = std::move(deps);
    s.ops.push_back(o);
    return o.id;
  }
};

}  // namespace tptune::test
