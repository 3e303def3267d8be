// tp-plan export --format python: the parallelize_module plan dict of a Plan (see plans/export/export.h).

#include <fmt/format.h>

#include <set>
#include <string_view>

#include "plans/export/export.h"
#include "plans/util/checked_math.h"

namespace tptune {

namespace {

bool in_block(const std::string& pattern) { return pattern.rfind("layers.", 0) == 0; }

std::string last_component(const std::string& pattern) {
  const size_t dot = pattern.rfind('.');
  return dot == std::string::npos ? pattern : pattern.substr(dot + 1);
}

std::string py_bool(bool b) { return b ? "True" : "False"; }

// A module-input layout tuple. torchtitan's Attention.forward takes (x, freqs_cis); only x is a DTensor input, so
// the tuple carries None for freqs_cis. Other modules take x alone.
std::string input_tuple(const std::string& pattern, const Placement& p) {
  if (last_component(pattern) == "attention") return fmt::format("({}, None)", torch_placement(p));
  return fmt::format("({},)", torch_placement(p));
}

struct Rendered {
  std::string expr;   // empty: not expressible (a comment is emitted instead)
  std::string klass;  // the class used, for the imports
};

// The style's constructor call; arguments equal to torch's defaults are left out.
Rendered render(const PlanEntry& e, bool float8_tensorwise) {
  const ParallelStyle& s = e.style;
  const ParallelStyle def = ParallelStyle::defaults(s.kind);
  // torchtitan swaps in torchao's float8 styles for the block linears only (embedding and output stay bf16).
  const bool f8 = float8_tensorwise && in_block(e.pattern);
  std::vector<std::string> args;
  Rendered r;
  switch (s.kind) {
    case StyleKind::colwise:
    case StyleKind::rowwise:
      r.klass = s.kind == StyleKind::colwise ? (f8 ? "Float8ColwiseParallel" : "ColwiseParallel")
                                             : (f8 ? "Float8RowwiseParallel" : "RowwiseParallel");
      if (!(s.input_layout == def.input_layout)) args.push_back("input_layouts=" + torch_placement(s.input_layout));
      if (!(s.output_layout == def.output_layout)) args.push_back("output_layouts=" + torch_placement(s.output_layout));
      if (s.use_local_output != def.use_local_output) args.push_back("use_local_output=" + py_bool(s.use_local_output));
      break;
    case StyleKind::sequence_parallel:
      r.klass = "SequenceParallel";
      if (s.use_local_output != def.use_local_output) args.push_back("use_local_output=" + py_bool(s.use_local_output));
      break;
    case StyleKind::prepare_module_input:
      r.klass = f8 ? "PrepareFloat8ModuleInput" : "PrepareModuleInput";
      args.push_back("input_layouts=" + input_tuple(e.pattern, s.input_layout));
      args.push_back("desired_input_layouts=" + input_tuple(e.pattern, s.desired_input_layout));
      if (s.use_local_output) args.push_back("use_local_output=True");
      break;
    case StyleKind::no_parallel:
      return r;
  }
  r.expr = fmt::format("{}({})", r.klass, fmt::join(args, ", "));
  return r;
}

}  // namespace

std::string export_python(const Plan& plan, const ExportContext& ctx) {
  const bool f8 = plan.float8 == Float8Recipe::tensorwise;
  std::vector<std::string> lines;
  std::set<std::string> torch_classes, torchao_classes, placements;
  for (const PlanEntry& e : plan.modules) {
    Rendered r = render(e, f8);
    if (r.expr.empty()) {
      lines.push_back(
          fmt::format("        # \"{}\": not parallelized (no_parallel: replicated parameters, plain "
                      "tensors); parallelize_module needs no entry",
                      comment_text(e.pattern)));
      continue;
    }
    (r.klass.rfind("Float8", 0) == 0 || r.klass == "PrepareFloat8ModuleInput" ? torchao_classes : torch_classes)
        .insert(r.klass);
    for (std::string_view p : {"Replicate()", "Shard(", "Partial()"})
      if (r.expr.find(p) != std::string::npos) placements.insert(std::string(p.substr(0, p.find('('))));
    lines.push_back(fmt::format("        {}: {},", python_string(e.pattern), r.expr));
  }
  torch_classes.insert("parallelize_module");

  std::string out;
  out += fmt::format("# The parallelize_module plan of the tptune plan '{}' ({}), written by `tp-plan export`.\n",
                     comment_text(plan.family), comment_text(plan.source));
  out += fmt::format(
      "# tp {}, dp_shard {}, float8 {}, async TP {}, loss parallel {}, activation checkpointing {}, "
      "local batch size {}.\n",
      plan.tp_degree, plan.dp_shard, to_string(plan.float8), plan.async_tp ? "on" : "off",
      plan.loss_parallel ? "on" : "off", ac_text(plan.activation_checkpointing, plan.ac_layers, ctx.n_layers),
      plan.local_batch_size);
  if (plan.ac_layers > 0 && plan.activation_checkpointing != ActivationCheckpointing::none &&
      (ctx.n_layers <= 0 || plan.ac_layers < ctx.n_layers))
    out += fmt::format(
        "# Activation checkpointing on the first {} blocks only: wrap model.layers[0 .. {}] in checkpoint_wrapper\n"
        "# (torch.distributed.algorithms._checkpoint.checkpoint_wrapper) and leave the others unwrapped.\n",
        plan.ac_layers, plan.ac_layers - 1);
  if (plan.dp_replicate > 1)
    out += fmt::format(
        "# HSDP: dp_replicate {} x dp_shard {} x tp {}. The TP plan below is the same; data parallelism is FSDP2's\n"
        "# fully_shard on the [dp_replicate, dp_shard] mesh (torchtitan: data_parallel_replicate_degree {}), which\n"
        "# all-reduces each reduce-scattered gradient shard across the replicas.\n",
        plan.dp_replicate, plan.dp_shard, plan.tp_degree, plan.dp_replicate);
  if (plan.ep_degree > 1) {
    // Each degree is a loaded plan's (<= 2^20): the product is checked all the same.
    const int64_t dense =
        checked_mul({int64_t{plan.dp_shard}, int64_t{plan.cp_degree}, int64_t{plan.tp_degree}}, "dp_shard x cp x tp");
    out += fmt::format(
        "# Expert parallelism: ep {} (torchtitan: parallelism.expert_parallel_degree {}). The routed experts are\n"
        "# Shard(0) on the ep axis of the sparse mesh (pp, dp_replicate, efsdp, ep), efsdp = dp_shard x cp x tp / ep\n"
        "# = {} / {}{}, and fully_shard'ed over efsdp; the router, shared and routed experts are sharded by\n"
        "# torchtitan's MoE plan (models/common/moe_sharding.py), not by entries of the dict below.\n",
        plan.ep_degree, plan.ep_degree, dense, plan.ep_degree,
        dense % plan.ep_degree == 0 ? fmt::format(" = {}", dense / plan.ep_degree)
                                    : std::string(" (not whole: torchtitan refuses this mesh)"));
  }
  if (plan.gradient_accumulation_steps > 1)
    out += fmt::format(
        "# Gradient accumulation: {} microbatches of local batch {} per optimizer step (torchtitan: "
        "training.global_batch_size {}); the plan below is the same for each microbatch.\n",
        plan.gradient_accumulation_steps, plan.local_batch_size, plan.global_batch_size());
  if (plan.tp_degree == 1)
    out += "# At tp 1 torchtitan applies no tensor parallelism; the plan is kept for reference.\n";
  out += "import torch\n";
  out += "from torch.distributed.device_mesh import DeviceMesh\n";
  if (!placements.empty()) out += fmt::format("from torch.distributed.tensor import {}\n", fmt::join(placements, ", "));
  out += "from torch.distributed.tensor.parallel import (\n";
  for (const std::string& c : torch_classes) out += fmt::format("    {},\n", c);
  out += ")\n";
  if (!torchao_classes.empty()) {
    out += "from torchao.float8.float8_tensor_parallel import (\n";
    for (const std::string& c : torchao_classes) out += fmt::format("    {},\n", c);
    out += ")\n";
  }
  out += fmt::format("\nTP_DEGREE = {}\n", plan.tp_degree);
  out += "\n\ndef tp_plan() -> dict:\n";
  out += "    \"\"\"FQN pattern -> parallel style, in the plan's order (\"*\" matches one module name).\"\"\"\n";
  out += "    return {\n";
  for (const std::string& l : lines) out += l + "\n";
  out += "    }\n";
  out += "\n\ndef apply_tp(model: torch.nn.Module, tp_mesh: DeviceMesh) -> None:\n";
  out += "    \"\"\"Applies the plan on the 1-D tensor-parallel mesh, before FSDP (as torchtitan's apply_tp).\"\"\"\n";
  out += "    assert tp_mesh.size() == TP_DEGREE, f\"expected a TP mesh of {TP_DEGREE} ranks, got {tp_mesh.size()}\"\n";
  out += "    parallelize_module(model, tp_mesh, tp_plan())\n";
  if (plan.async_tp && plan.tp_degree > 1) {
    out += "    # Async TP: inductor's micro-pipeline TP pass over symmetric memory (compile the blocks).\n";
    out += "    from torch.distributed._symmetric_memory import enable_symm_mem_for_group\n\n";
    out += "    torch._inductor.config._micro_pipeline_tp = True\n";
    out += "    enable_symm_mem_for_group(tp_mesh.get_group().group_name)\n";
  }
  if (plan.loss_parallel && plan.tp_degree > 1) {
    out += "\n\n# Loss parallel: the logits stay vocab-sharded (Shard(-1)); compute the loss and its backward under\n";
    out += "#     with torch.distributed.tensor.parallel.loss_parallel():\n";
    out += "#         loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(0, 1))\n";
    out += "#         loss.backward()\n";
  }
  return out;
}

}  // namespace tptune
