// Reading and writing check baselines (sim/check/baseline.h).
#include "sim/check/baseline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/json_text.h"
#include "plans/util/output_file.h"
#include "plans/util/version.h"
#include "sim/report/pipeline_text.h"

namespace tptune {

// An op's row: its JSON members are its fields, by the same names (to_json, found by ADL).
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(BaselineOp, name, phase, kind, stream, count, total_ms)

namespace {

constexpr const char* kFormat = "tptune-check-baseline";
constexpr int kVersion = 1;
constexpr double kGiB = 1073741824.0;
constexpr const char* kHowToWrite = "write one with `tp-plan check CONFIG ... --baseline FILE --update`";

using nlohmann::json;

// Looks up `key` in object `j` (at `path`), throwing "WHERE: PATH.KEY: missing ..." when absent.
const json& member(const json& j, const std::string& key, const std::string& path, const std::string& where,
                   const char* expected) {
  auto it = j.find(key);
  if (it == j.end())
    throw Error(fmt::format("{}: {}{}: missing (expected {}); {}", where, path, key, expected, kHowToWrite));
  return *it;
}

double number(const json& j, const std::string& key, const std::string& path, const std::string& where,
              const char* expected) {
  const json& v = member(j, key, path, where, expected);
  if (!v.is_number() || !std::isfinite(v.get<double>())) JsonDoc(where).fail(path + key, expected, v);
  return v.get<double>();
}

std::string text(const json& j, const std::string& key, const std::string& path, const std::string& where,
                 const char* expected) {
  const json& v = member(j, key, path, where, expected);
  if (!v.is_string()) JsonDoc(where).fail(path + key, expected, v);
  return v.get<std::string>();
}

const json& object(const json& j, const std::string& key, const std::string& where, const char* expected) {
  const json& v = member(j, key, "", where, expected);
  if (!v.is_object()) JsonDoc(where).fail(key, expected, v);
  return v;
}

std::map<std::string, double> number_map(const json& j, const std::string& key, const std::string& where,
                                         const char* expected) {
  std::map<std::string, double> out;
  for (const auto& [k, v] : object(j, key, where, expected).items()) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) JsonDoc(where).fail(json_key(key, k), "a number", v);
    out[k] = v.get<double>();
  }
  return out;
}

// A pipeline's terms (baseline.h): its setup, its bubble in the breakdown, its stages' actions as ops.
void add_pipeline(const StepReport& r, CheckBaseline& b) {
  const PipelineReport& p = r.pipeline;
  b.setup["pp"] = fmt::format("{} ({}, {} stage{} per rank, {} microbatches of {})", p.pp, to_string(p.schedule),
                              p.stages_per_rank, p.stages_per_rank == 1 ? "" : "s", p.microbatches, p.microbatch_size);
  b.breakdown_ms["pipeline_bubble"] =
      std::max(0.0, r.step_time_ms - r.compute_ms - r.exposed_tp_comm_ms - r.exposed_dp_comm_ms);
  const double ga = static_cast<double>(std::max<int64_t>(1, r.gradient_accumulation_steps));
  std::map<std::pair<int, PipelineActionKind>, BaselineOp> by_stage;
  for (const auto& rank : p.timeline)
    for (const TimedPipelineAction& a : rank) {
      BaselineOp& op = by_stage[{a.action.stage, a.action.kind}];
      if (op.name.empty())
        op = {fmt::format("stage {}", a.action.stage),
              std::string(pipeline_action_words(a.action.kind)),
              fmt::format("pipeline {}", to_string(a.action.kind)),
              "compute",
              0,
              0};
      op.count += r.gradient_accumulation_steps;
      op.total_ms += ga * (a.end_us - a.start_us) / 1e3;
    }
  for (auto& [key, op] : by_stage) {
    b.kind_ms[op.kind] += op.total_ms;
    b.ops.push_back(std::move(op));
  }
  std::stable_sort(b.ops.begin(), b.ops.end(),
                   [](const BaselineOp& x, const BaselineOp& y) { return x.total_ms > y.total_ms; });
}

}  // namespace

CheckBaseline baseline_from_report(const StepReport& r) {
  CheckBaseline b;
  b.setup = {{"model", r.model},
             {"gpu", r.gpu},
             {"cluster", fmt::format("{} nodes x {} GPUs", r.nodes, r.gpus_per_node)},
             {"plan", r.plan},
             {"tp", std::to_string(r.tp_degree)},
             {"dp", std::to_string(r.dp_shard)},
             {"float8", std::string(to_string(r.float8))},
             {"async_tp", r.async_tp ? "on" : "off"},
             {"loss_parallel", r.loss_parallel ? "on" : "off"},
             {"activation_checkpointing", std::string(to_string(r.activation_checkpointing))},
             {"local_batch_size", std::to_string(r.local_batch_size)},
             {"seq_len", std::to_string(r.seq_len)}};
  if (r.dp_replicate > 1) b.setup["dp_replicate"] = std::to_string(r.dp_replicate);  // HSDP runs only
  if (r.cp_degree > 1)                                                               // context-parallel runs only
    b.setup["cp"] = fmt::format("{} (rotate {}, load balance {})", r.cp_degree, to_string(r.cp_rotate),
                                r.cp_load_balance ? "on" : "off");
  if (r.gradient_accumulation_steps > 1)  // runs that accumulate only
    b.setup["gradient_accumulation_steps"] = std::to_string(r.gradient_accumulation_steps);
  b.written_by = this_build();
  b.step_time_ms = r.step_time_ms;
  b.tokens_per_second_per_gpu = r.tokens_per_second_per_gpu;
  const MemoryReport& m = r.memory;
  b.peak_memory_gib = m.peak / kGiB;
  b.memory_capacity_gib = m.capacity / kGiB;
  b.fits_in_memory = m.fits;
  b.breakdown_ms = {
      {"compute", r.compute_ms}, {"exposed_tp_comm", r.exposed_tp_comm_ms}, {"exposed_dp_comm", r.exposed_dp_comm_ms}};
  b.memory_gib = {{"master_params", m.master_params / kGiB},
                  {"gradients", m.gradients / kGiB},
                  {"optimizer", m.optimizer / kGiB},
                  {"activations", m.activations / kGiB},
                  {"working_set", m.working_set / kGiB},
                  {"params_in_flight", m.params_in_flight / kGiB},
                  {"runtime_overhead", m.runtime_overhead / kGiB}};
  if (r.pipeline.pp > 1) {
    add_pipeline(r, b);  // its stages' actions in place of the ops (its top ops are one rank's, not the step's)
    return b;
  }
  for (const OpSummary& op : r.top_ops) {
    b.ops.push_back({op.name, op.phase, op.kind, std::string(to_string(op.stream)), op.count, op.total_us / 1e3});
    b.kind_ms[op.kind] += op.total_us / 1e3;
  }
  return b;
}

nlohmann::json to_json(const CheckBaseline& b) {
  json j = json_header(kFormat, kVersion);
  j["setup"] = b.setup;
  j["step_time_ms"] = b.step_time_ms;
  j["tokens_per_second_per_gpu"] = b.tokens_per_second_per_gpu;
  j["peak_memory_gib"] = b.peak_memory_gib;
  j["memory_capacity_gib"] = b.memory_capacity_gib;
  j["fits_in_memory"] = b.fits_in_memory;
  j["breakdown_ms"] = b.breakdown_ms;
  j["memory_gib"] = b.memory_gib;
  j["kind_ms"] = b.kind_ms;
  j["ops"] = b.ops;
  if (b.written_by) j[kVersionStampKey] = to_json(*b.written_by);
  return j;
}

CheckBaseline baseline_from_json(const json& j, const std::string& where) {
  if (!j.is_object())
    throw Error(fmt::format("{}: expected a JSON object (a {} file), got {}", where, kFormat, j.type_name()));
  if (text(j, "format", "", where, "the string \"tptune-check-baseline\"") != kFormat)
    JsonDoc(where).fail("format", fmt::format("\"{}\"", kFormat), j["format"]);
  const double version = number(j, "version", "", where, "the format version 1");
  if (version != kVersion)
    throw Error(fmt::format("{}: version: expected {}, got {} (written by another tptune version; {})", where, kVersion,
                            describe_json(j["version"]), kHowToWrite));
  CheckBaseline b;
  b.written_by = read_build_stamp(j, where);
  for (const auto& [k, v] : object(j, "setup", where, "an object describing the predicted setup").items())
    b.setup[k] = v.is_string() ? v.get<std::string>() : describe_json(v);
  b.step_time_ms = number(j, "step_time_ms", "", where, "a number: the predicted step time in ms");
  b.tokens_per_second_per_gpu =
      number(j, "tokens_per_second_per_gpu", "", where, "a number: the predicted tokens/s per GPU");
  b.peak_memory_gib = number(j, "peak_memory_gib", "", where, "a number: the predicted peak memory in GiB");
  b.memory_capacity_gib = number(j, "memory_capacity_gib", "", where, "a number: the GPU memory in GiB");
  if (b.step_time_ms <= 0 || b.tokens_per_second_per_gpu <= 0 || b.peak_memory_gib <= 0)
    throw Error(
        fmt::format("{}: step_time_ms, tokens_per_second_per_gpu and peak_memory_gib: expected positive "
                    "numbers, got {}, {}, {}",
                    where, b.step_time_ms, b.tokens_per_second_per_gpu, b.peak_memory_gib));
  const json& fits = member(j, "fits_in_memory", "", where, "true or false");
  if (!fits.is_boolean())
    throw Error(fmt::format("{}: fits_in_memory: expected true or false, got {}", where, describe_json(fits)));
  b.fits_in_memory = fits.get<bool>();
  b.breakdown_ms = number_map(j, "breakdown_ms", where, "an object of times in ms (compute, exposed_tp_comm, ...)");
  b.memory_gib = number_map(j, "memory_gib", where, "an object of sizes in GiB (master_params, activations, ...)");
  b.kind_ms = number_map(j, "kind_ms", where, "an object of times in ms per op class");
  const json& ops = member(j, "ops", "", where, "an array of ops");
  if (!ops.is_array()) JsonDoc(where).fail("ops", "an array of ops", ops);
  for (size_t i = 0; i < ops.size(); ++i) {
    const std::string path = fmt::format("ops[{}].", i);
    if (!ops[i].is_object()) JsonDoc(where).fail(fmt::format("ops[{}]", i), "an object", ops[i]);
    BaselineOp op;
    op.name = text(ops[i], "name", path, where, "the op's name");
    op.phase = text(ops[i], "phase", path, where, "the op's phase");
    op.kind = text(ops[i], "kind", path, where, "the op's kind");
    op.stream = text(ops[i], "stream", path, where, "the op's stream");
    const double count = number(ops[i], "count", path, where, "a non-negative integer (instances per step)");
    if (count < 0 || count != std::floor(count) || count > 1e9)
      throw Error(fmt::format("{}: {}count: expected a non-negative integer, got {}", where, path, count));
    op.count = static_cast<int64_t>(count);
    op.total_ms = number(ops[i], "total_ms", path, where, "a number (ms per step)");
    b.ops.push_back(std::move(op));
  }
  return b;
}

CheckBaseline read_baseline(const std::string& path) {
  std::string text;
  try {
    text = read_input_file(path, "check baseline JSON");
  } catch (const Error& e) {
    throw Error(fmt::format("{}; {}", e.what(), kHowToWrite));
  }
  return baseline_from_json(parse_json_text(text, path, fmt::format("a {} file", kFormat)), path);
}

void write_baseline(const CheckBaseline& b, const std::string& path) {
  write_output("--baseline", path, json_dump(with_version_stamp(to_json(b)), 2) + "\n");
}

}  // namespace tptune
