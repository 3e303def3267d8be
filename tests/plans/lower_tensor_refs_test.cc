// The three lowering paths that once held a `const TensorDesc&` into Program::tensors across a call that appended
// to it (issue 8): Emitter::add_grad, Layers::finish_param_grad and redistribute_raw's local slice. The storage is
// now a deque (appends never move a tensor); these tests drive each path and check the metadata the stale
// reference used to corrupt. Under ASan (the sanitizer stage of .ci/run) they also fail on any read of freed memory.
#include <catch2/catch.hpp>

#include "lowering_helpers.h"
#include "plans/language/plan.h"

using namespace tptune;
using namespace tptune::testing;

namespace {

const TensorDesc& out0(const Program& p, const Op& op) { return p.tensor(op.outputs.at(0)); }
const TensorDesc& in(const Program& p, const Op& op, size_t k) { return p.tensor(op.inputs.at(k)); }
int64_t bytes(const TensorDesc& t) { return numel(t.local_shape) * bytes_per_element(t.dtype); }

// Every op that the three paths emit, checked against the tensors it names.
int check_ops(const Program& p, std::string_view name_part) {
  int seen = 0;
  for (const Segment& s : p.segments)
    for (const Op& op : s.ops) {
      if (op.name.find(name_part) == std::string::npos) continue;
      ++seen;
      INFO(to_string(s.kind) << ": " << op.name);
      const TensorDesc& y = out0(p, op);
      CHECK_FALSE(y.name.empty());
      if (auto* e = std::get_if<ElementwiseOp>(&op.kind)) {
        if (e->fn == ElementwiseOp::Fn::add) {  // a + b -> sum: same shape and dtype, 3 tensors of traffic
          CHECK(in(p, op, 0).local_shape == y.local_shape);
          CHECK(in(p, op, 1).local_shape == y.local_shape);
          CHECK(in(p, op, 0).dtype == y.dtype);
          CHECK(e->bytes == 3 * bytes(y));
          CHECK(y.name == in(p, op, 0).name + ".sum");
        }
        if (e->fn == ElementwiseOp::Fn::slice) {  // read the whole input, write this rank's slice
          CHECK(e->bytes == bytes(in(p, op, 0)) + bytes(y));
          CHECK(y.name == in(p, op, 0).name + ".slice");
          CHECK(y.dtype == in(p, op, 0).dtype);
        }
      }
      if (auto* c = std::get_if<CollectiveOp>(&op.kind); c && c->kind == CollectiveKind::all_reduce) {
        CHECK(y.local_shape == in(p, op, 0).local_shape);
        CHECK(y.global_shape == in(p, op, 0).global_shape);
        CHECK(c->bytes == numel(y.global_shape) * bytes_per_element(c->dtype));
      }
    }
  return seen;
}

}  // namespace

TEST_CASE("gradient sums keep the shape and name of what they sum (Emitter::add_grad)") {
  // The vanilla plan at tp 8: wq/wk/wv share one plain input, so its gradient is summed from three all-reduced
  // addends per block (and the residual stream adds more).
  Program p = lower_preset("vanilla", {.tp_degree = 8});
  CHECK(check_ops(p, "grad_sum") > 0);
}

TEST_CASE("sequence-parallel layernorm weights and biases all-reduce their partial gradients (finish_param_grad)") {
  Model m;
  m.dim = 64;
  m.n_layers = 1;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.ffn_dim = 128;
  m.vocab_size = 256;
  m.norm = Norm::layernorm;
  // dp 2: FSDP wraps the model, so the Partial gradients are all-reduced in backward by finish_param_grad (at dp 1
  // DTensor leaves them Partial until the optimizer step, lower.cc's optimizer()).
  Program p = lower_preset("sequence_parallel", {.tp_degree = 2, .dp_shard = 2}, m, 32);
  // attention_norm and ffn_norm: weight and bias each = 4 all-reduces per block; the final norm 2 more.
  CHECK(block_count(p, "backward", CollectiveKind::all_reduce) == 4);
  CHECK(check_ops(p, "norm.bwd.all_reduce") >= 4);
  for (const TensorDesc& t : p.tensors)
    if (t.role == TensorRole::param_grad) {
      INFO(t.name);
      CHECK_FALSE(t.param.empty());
    }
}

TEST_CASE("a replicated input sliced for a rowwise linear under float8 (redistribute_raw's local slice)") {
  Model m;
  model_preset("tiny-llama", m);
  Training t;
  t.seq_len = 32;
  t.dtype = DType::fp32;
  // The issue's reproducer: wq/wk colwise but wv replicated, so each rank would attend over 2 key heads and 4 value
  // heads (and wo, declaring its input R, would slice 32 features to 16 against a 32-feature weight shard): a user
  // error, now refused where the heads meet.
  const char* mismatched = R"(
tp_degree: 2
float8: rowwise
modules:
  tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: R}
  layers.*.attention.wq: colwise
  layers.*.attention.wk: colwise
  layers.*.attention.wo: {style: rowwise, input_layouts: Replicate(), output_layouts: R}
)";
  CHECK_THAT(lowering_error(m, t, load_plan_string(mismatched, "slice.yaml")),
             Catch::Matchers::Contains("layers.0.attention") &&
                 Catch::Matchers::Contains("local key heads (2) and value heads (4) differ"));
  // Consistent: the full attention output (64 features, R) sliced to wo's 32-feature input shard.
  const char* consistent = R"(
tp_degree: 2
float8: rowwise
modules:
  tok_embeddings: {style: rowwise, input_layouts: R, output_layouts: R}
  layers.*.attention.wo: {style: rowwise, input_layouts: Replicate(), output_layouts: R}
)";
  Program p = lower(m, t, load_plan_string(consistent, "slice.yaml"));
  CHECK(check_ops(p, ".slice") > 0);
}
