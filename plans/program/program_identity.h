#pragma once
// What a Program is a Program of, as the "program" object of a tp-run profile (plans/program/profile_format.h) records
// it, and the check that a profile belongs to a simulated Program (`tp-plan simulate --measured`,
// sim/report/measured_trace.h):
//   {"model": {"name", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "vocab_size", "mlp", "norm"},
//    "training": {"seq_len", "local_batch_size", "dtype", "activation_checkpointing", "compile" (true, only for a
//                 compiled Program: its fused kernels ran; absent in older profiles, which ran the eager ones)},
//    "plan": {"family", "source", "tp_degree", "float8", "async_tp", "loss_parallel"}, "tp", "dp"}
// One function writes it (the profiler) and one compares it, so that the two cannot drift apart.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "plans/program/program.h"

namespace tptune {

nlohmann::json program_identity(const Program& p);

// Throws tptune::Error naming `name` and what differs ("model.dim 256 (profile) vs 512 (simulated), plan.tp_degree 4
// vs 2") when `profiled` (a profile's "program" object) describes another model, training or plan than `p`. Names
// (model.name, plan.family, plan.source) are not compared: one plan read from a file and from a preset is one plan.
// When `profiled` carries "plan_yaml" (tp-run profile writes it), every module's style is compared too.
// With `lowered_from` ("its config_yaml"), `p` is what the profile's own YAML lowers to, and a difference says so:
// "NAME: program: the profiled model, training or plan is not the one its config_yaml lowers to: model.dim 4096
// (profile) vs 256 (its config_yaml)".
void check_same_program(const nlohmann::json& profiled, const Program& p, const std::string& name,
                        std::string_view lowered_from = {});

}  // namespace tptune
