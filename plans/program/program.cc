#include "plans/program/program.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

// Phase's enumerators, in declaration order.
constexpr std::string_view kPhaseNames[] = {"forward", "backward", "recompute", "optimizer"};
static_assert(std::size(kPhaseNames) == enum_count(Phase::optimizer));

std::string_view to_string(Phase p) { return name_of(kPhaseNames, p); }

// Group's enumerators, in declaration order.
constexpr std::string_view kGroupNames[] = {"tp", "dp", "dp_replicate", "cp", "pp", "ep", "efsdp"};
static_assert(std::size(kGroupNames) == enum_count(Group::efsdp));

std::string_view to_string(Group g) { return name_of(kGroupNames, g); }

// ElementwiseOp::Fn's enumerators, in declaration order.
constexpr std::string_view kElementwiseOpFnNames[] = {
    "rmsnorm",       "rmsnorm_bwd",    "layernorm",       "layernorm_bwd",  "rope",
    "rope_bwd",      "swiglu",         "swiglu_bwd",      "gelu",           "gelu_bwd",
    "add",           "accumulate",     "bias_add",        "bias_grad",      "slice",
    "adamw",         "copy",           "grad_norm",       "grad_clip",      "attention_merge",
    "concat",        "repeat_kv",      "repeat_kv_bwd",   "add_rmsnorm",    "rmsnorm_bwd_add",
    "rope_qk",       "rope_qk_bwd",    "moe_router",      "moe_router_bwd", "moe_permute",
    "moe_unpermute", "moe_combine",    "moe_combine_bwd", "host_sync",      "gate_mul",
    "gate_mul_bwd",  "moe_bias_update"};
static_assert(std::size(kElementwiseOpFnNames) == enum_count(ElementwiseOp::Fn::moe_bias_update));

std::string_view to_string(ElementwiseOp::Fn f) { return name_of(kElementwiseOpFnNames, f); }

// CrossEntropyOp::Stage's enumerators, in declaration order.
constexpr std::string_view kCrossEntropyOpStageNames[] = {"row_max", "sum_exp", "target_logit", "loss", "backward"};
static_assert(std::size(kCrossEntropyOpStageNames) == enum_count(CrossEntropyOp::Stage::backward));

std::string_view to_string(CrossEntropyOp::Stage s) { return name_of(kCrossEntropyOpStageNames, s); }

int64_t AttentionOp::flops() const {
  // QK^T and PV: 2 matmuls x 2*s*s*d per head = 4*b*h*s^2*d; causal keeps half: 2*b*h*s^2*d.
  // Backward recomputes P and does 4 more matmuls (dV, dP, dQ, dK): 2.5x the forward.
  // With v_head_dim (latent attention) PV's width differs: (causal ? 1 : 2) x b x h x s x kv x (d + dv), the same
  // number when dv = d.
  int64_t fwd = checked_mul({causal ? 1 : 2, batch, n_heads, seq, keys(), head_dim + v_dim()},
                            "attention FLOPs (batch x heads x seq^2 x head_dim)");
  if (!backward) return fwd;
  return fwd % 2 == 0 ? checked_mul(fwd / 2, 5, "attention backward FLOPs")
                      : checked_mul(fwd, 5, "attention backward FLOPs") / 2;
}

int64_t GemmOp::flops() const {
  if (groups == 1) return checked_mul({2, m, n, k}, "GEMM FLOPs (2 x m x n x k)");
  return checked_mul({2, groups, m, n, k}, "grouped GEMM FLOPs (2 x groups x m x n x k)");
}

std::string_view kind_name(const OpKind& k) {
  static constexpr std::string_view names[] = {"gemm",          "attention", "elementwise", "embedding",
                                               "cross_entropy", "cast_fp8",  "collective"};
  return names[k.index()];
}

const Segment* Program::segment(SegmentKind kind) const {
  for (const auto& s : segments)
    if (s.kind == kind) return &s;
  return nullptr;
}

std::string layer_fqn(int layer, const std::string& name) {
  return layer < 0 ? name : fmt::format("layers.{}.{}", layer, name);
}

bool is_per_layer_segment(const Segment& s) { return s.repeat > 1 || is_block(s.kind); }

int segment_instances(const Program& p, const Segment& s) {
  if (!is_per_layer_segment(s)) return 1;
  return s.layer_count > 0 ? s.layer_count : p.layer_count();
}

int instance_layer(const Program& p, const Segment& s, int i) {
  if (!is_per_layer_segment(s)) return -1;
  const int n = segment_instances(p, s);
  return s.first_layer + (s.reverse ? n - 1 - i : i);
}

int layer_instance(const Program& p, const Segment& s, int layer) {
  if (!is_per_layer_segment(s)) return -1;
  const int n = segment_instances(p, s), i = layer - s.first_layer;
  if (i < 0 || i >= n) return -1;
  return s.reverse ? n - 1 - i : i;
}

FlatProgram expand(const Program& p) {
  FlatProgram flat;
  const int first = p.first_layer(), L = p.layer_count();
  // Flat id of (template tensor, layer); layer -1 for global tensors.
  std::map<std::pair<TensorId, int>, int> id;
  auto add_tensor = [&](TensorId t, int layer) {
    int f = static_cast<int>(flat.tensors.size());
    flat.tensors.push_back({layer_fqn(layer, p.tensor(t).name), t, layer});
    id[{t, layer}] = f;
    return f;
  };
  std::map<TensorId, const LayerChain*> chain_in, chain_sink;
  for (const auto& c : p.chains) {
    chain_in[c.in] = &c;
    chain_sink[c.sink] = &c;
  }
  for (TensorId t = 0; t < static_cast<TensorId>(p.tensors.size()); ++t) {
    if (!p.tensor(t).per_layer && !chain_sink.count(t)) add_tensor(t, -1);
  }
  // Per-layer tensors; chain inputs alias the previous layer's output (or the source).
  for (TensorId t = 0; t < static_cast<TensorId>(p.tensors.size()); ++t) {
    if (!p.tensor(t).per_layer || chain_in.count(t)) continue;
    for (int l = first; l < first + L; ++l) add_tensor(t, l);
  }
  for (const auto& c : p.chains) {
    for (int i = 0; i < L; ++i) {
      int l = first + (c.reverse ? L - 1 - i : i);
      int prev = c.reverse ? l + 1 : l - 1;
      id[{c.in, l}] = i == 0 ? id.at({c.source, -1}) : id.at({c.out, prev});
    }
    id[{c.sink, -1}] = L == 0 ? id.at({c.source, -1}) : id.at({c.out, c.reverse ? first : first + L - 1});
  }

  std::vector<int> last_writer(flat.tensors.size(), -1);
  for (const auto& seg : p.segments) {
    const int n = segment_instances(p, seg);
    for (int i = 0; i < n; ++i) {
      const int layer = instance_layer(p, seg, i);
      const int base = static_cast<int>(flat.ops.size());
      for (const Op& op : seg.ops) {
        FlatOp f;
        f.op = &op;
        f.layer = layer;
        f.module = layer_fqn(layer, op.module);
        f.name = layer_fqn(layer, op.name);
        auto map_t = [&](TensorId t) { return id.at({t, p.tensor(t).per_layer ? layer : -1}); };
        for (TensorId t : op.inputs) f.inputs.push_back(map_t(t));
        for (TensorId t : op.outputs) f.outputs.push_back(map_t(t));
        std::vector<int> deps;
        for (int d : op.deps) deps.push_back(base + d);
        for (int t : f.inputs)
          if (last_writer[t] >= 0 && last_writer[t] < base) deps.push_back(last_writer[t]);
        for (int t : f.outputs)
          if (last_writer[t] >= 0 && last_writer[t] < base) deps.push_back(last_writer[t]);
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        f.deps = std::move(deps);
        int fid = static_cast<int>(flat.ops.size());
        for (int t : f.outputs) last_writer[t] = fid;
        flat.ops.push_back(std::move(f));
      }
    }
  }
  return flat;
}

}  // namespace tptune
