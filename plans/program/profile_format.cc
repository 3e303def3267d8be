#include "plans/program/profile_format.h"

#include <fmt/format.h>

#include <limits>
#include <type_traits>
#include <utility>
#include <variant>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/version.h"

namespace tptune {

// The records whose JSON members are their fields, by the same names (nlohmann's objects sort their keys, so the order
// here is free): written by to_json, found by ADL in this namespace.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProfilePipelineStage, first_layer, layers, rank)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProfilePipelineAction, stage, microbatch, kind, start_us, wait_us, end_us)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ProfilePipelineRank, pp_rank, end_us, busy_us, actions)

namespace {

using nlohmann::json;

constexpr limits::IntRange kNonNegative{0, std::numeric_limits<int64_t>::max()};
// A p2p message: at least a byte (a 0-byte time is no point of a bandwidth curve), at most the largest tensor
// (limits::max_tensor_elements) of 4-byte elements.
constexpr limits::IntRange kMessageBytes{1, limits::max_tensor_elements * 4};

// TensorRole's enumerators, in declaration order.
constexpr std::string_view kTensorRoleNames[] = {"input",      "activation", "gradient", "parameter",
                                                 "param_grad", "scale",      "loss",     "optimizer_state"};
static_assert(std::size(kTensorRoleNames) == enum_count(TensorRole::optimizer_state));

std::string_view role_name(TensorRole r) { return name_of(kTensorRoleNames, r); }

json summary_json(const TimeSummary& t) {
  json out = json::object();
  for (const char* name : {"median", "min", "p10", "p90", "max"})
    if (const auto& v = *t.statistic(name)) out[name] = *v;
  return out;
}

json tensor_json(const ProfileTensor& t) {
  return {{"name", t.name},   {"shape", t.shape},         {"global_shape", t.global_shape},
          {"dtype", t.dtype}, {"placement", t.placement}, {"role", t.role}};
}

json op_json(const ProfileOp& o) {
  json rec = {{"index", o.index}, {"name", o.name}, {"module", o.module}, {"layer", o.layer}, {"phase", o.phase}};
  if (o.segment) rec["segment"] = *o.segment;
  if (o.template_op) rec["template_op"] = *o.template_op;
  if (o.kind) rec["kind"] = *o.kind;
  if (!o.op.is_null()) rec["op"] = o.op;
  if (o.chunk) rec["chunk"] = {{"pattern", o.chunk->pattern}, {"step", o.chunk->step}, {"count", o.chunk->count}};
  json ins = json::array(), outs = json::array();
  for (const auto& t : o.inputs) ins.push_back(tensor_json(t));
  for (const auto& t : o.outputs) outs.push_back(tensor_json(t));
  rec["inputs"] = std::move(ins);
  rec["outputs"] = std::move(outs);
  if (!o.measured) rec["measured"] = false;
  if (o.seeded_from_local) rec["seeded_from_local"] = true;
  if (!o.fused.empty()) rec["fused"] = o.fused;
  rec["time_us"] = o.time_us ? summary_json(*o.time_us) : json(nullptr);
  if (o.measured) rec["samples_us"] = o.samples_us;
  return rec;
}

json pipeline_json(const ProfilePipeline& pl) {
  json p2p = json::array();
  for (const auto& x : pl.p2p)
    p2p.push_back({{"from", x.from},
                   {"to", x.to},
                   {"bytes", x.bytes},
                   {"time_us", summary_json(x.time_us)},
                   {"samples_us", x.samples_us}});
  json j = {{"pp", pl.pp},
            {"schedule", pl.schedule},
            {"microbatches", pl.microbatches},
            {"microbatch_size", pl.microbatch_size},
            {"stages", pl.stages},
            {"ranks", pl.ranks},
            {"p2p", p2p}};
  if (!pl.not_timed.empty()) j["not_timed"] = pl.not_timed;
  return j;
}

// The reads: every member checked where it is read (JsonDoc, plans/util/json_text.h); absent or null members stay
// unset.
struct Reader {
  JsonDoc doc;

  std::optional<std::string> string(const json& obj, const std::string& path, const char* key) const {
    const json* v = doc.find(obj, path, key);
    if (!v) return std::nullopt;
    return doc.string_value(*v, json_key(path, key));
  }
  std::optional<int64_t> integer(const json& obj, const std::string& path, const char* key,
                                 limits::IntRange r = kNonNegative) const {
    const json* v = doc.find(obj, path, key);
    if (!v) return std::nullopt;
    return doc.integer_value(*v, json_key(path, key), r);
  }
  const json* object(const json& obj, const std::string& path, const char* key) const {
    const json* v = doc.find(obj, path, key);
    if (v && !v->is_object()) doc.fail(json_key(path, key), "an object", *v);
    return v;
  }
  const json* array(const json& obj, const std::string& path, const char* key) const {
    const json* v = doc.find(obj, path, key);
    if (v && !v->is_array()) doc.fail(json_key(path, key), "a list", *v);
    return v;
  }
  // fn(element, where) for each element of the list `key` of `obj` (none when it is absent), where its path
  // "PATH.KEY[i]", the one walk of every list below.
  template <class Fn>
  void for_each_element(const json& obj, const std::string& path, const char* key, Fn&& fn) const {
    if (const json* a = array(obj, path, key))
      for (size_t i = 0; i < a->size(); ++i) fn((*a)[i], fmt::format("{}[{}]", json_key(path, key), i));
  }
  std::vector<int64_t> integers(const json& obj, const std::string& path, const char* key) const {
    std::vector<int64_t> out;
    for_each_element(obj, path, key, [&](const json& v, const std::string& w) {
      out.push_back(doc.integer_value(v, w, kNonNegative));
    });
    return out;
  }
  std::vector<double> times(const json& obj, const std::string& path, const char* key) const {
    std::vector<double> out;
    for_each_element(obj, path, key,
                     [&](const json& v, const std::string& w) { out.push_back(measured_time_us(doc, v, w)); });
    return out;
  }
  TimeSummary summary(const json& t, const std::string& path) const {
    TimeSummary s;
    for (const char* name : {"median", "min", "p10", "p90", "max"})
      if (const json* v = doc.find(t, path, name)) *s.statistic(name) = measured_time_us(doc, *v, json_key(path, name));
    return s;
  }
  std::optional<WallTimes> wall(const json& j, const char* key, const char* samples_key) const {
    const json* t = object(j, "", key);
    if (!t) return std::nullopt;
    return WallTimes{summary(*t, key), times(j, "", samples_key)};
  }
  std::vector<ProfileTensor> tensors(const json& rec, const std::string& path, const char* key) const {
    std::vector<ProfileTensor> out;
    for_each_element(rec, path, key, [&](const json& t, const std::string& w) {
      ProfileTensor pt;
      pt.name = doc.string(t, w, "name");
      pt.shape = integers(t, w, "shape");
      pt.global_shape = integers(t, w, "global_shape");
      pt.dtype = string(t, w, "dtype").value_or("");
      pt.placement = string(t, w, "placement").value_or("");
      pt.role = string(t, w, "role").value_or("");
      out.push_back(std::move(pt));
    });
    return out;
  }
  double time(const json& obj, const std::string& path, const char* key) const {
    return measured_time_us(doc, doc.member(obj, path, key), json_key(path, key));
  }
  ProfilePipeline pipeline(const json& pl) const {
    const std::string w = "pipeline";
    ProfilePipeline out;
    out.pp = doc.integer(pl, w, "pp", limits::degree);
    out.schedule = doc.string(pl, w, "schedule");
    out.microbatches = doc.integer(pl, w, "microbatches", limits::local_batch_size);
    out.microbatch_size = doc.integer(pl, w, "microbatch_size", limits::local_batch_size);
    out.not_timed = string(pl, w, "not_timed").value_or("");
    for_each_element(pl, w, "stages", [&](const json& sj, const std::string& sw) {
      out.stages.push_back({doc.integer(sj, sw, "first_layer", kNonNegative),
                            doc.integer(sj, sw, "layers", kNonNegative), doc.integer(sj, sw, "rank", kNonNegative)});
    });
    for_each_element(pl, w, "ranks", [&](const json& rj, const std::string& rw) {
      ProfilePipelineRank r;
      r.pp_rank = doc.integer(rj, rw, "pp_rank", kNonNegative);
      r.end_us = time(rj, rw, "end_us");
      r.busy_us = time(rj, rw, "busy_us");
      for_each_element(rj, rw, "actions", [&](const json& aj, const std::string& aw) {
        ProfilePipelineAction x;
        x.stage = doc.integer(aj, aw, "stage", kNonNegative);
        x.microbatch = doc.integer(aj, aw, "microbatch", kNonNegative);
        x.kind = doc.string(aj, aw, "kind");
        if (x.kind != "F" && x.kind != "B" && x.kind != "I" && x.kind != "W")
          doc.fail(json_key(aw, "kind"), fmt::format("expected F, B, I or W, got '{}'", x.kind));
        x.start_us = time(aj, aw, "start_us");
        x.wait_us = time(aj, aw, "wait_us");
        x.end_us = time(aj, aw, "end_us");
        r.actions.push_back(std::move(x));
      });
      out.ranks.push_back(std::move(r));
    });
    for_each_element(pl, w, "p2p", [&](const json& xj, const std::string& xw) {
      ProfileP2P x;
      x.from = doc.integer(xj, xw, "from", kNonNegative);
      x.to = doc.integer(xj, xw, "to", kNonNegative);
      x.bytes = doc.integer(xj, xw, "bytes", kMessageBytes);
      const json* t = object(xj, xw, "time_us");
      if (!t) doc.fail(json_key(xw, "time_us"), "missing");
      x.time_us = summary(*t, json_key(xw, "time_us"));
      x.samples_us = times(xj, xw, "samples_us");
      out.p2p.push_back(std::move(x));
    });
    return out;
  }
  ProfileOp op(const json& rec, const std::string& w) const {
    ProfileOp o;
    o.index = integer(rec, w, "index").value_or(0);
    o.name = doc.string(rec, w, "name");
    o.module = string(rec, w, "module").value_or("");
    o.phase = string(rec, w, "phase").value_or("");
    o.segment = string(rec, w, "segment");
    o.kind = string(rec, w, "kind");
    o.layer = integer(rec, w, "layer", {-1, std::numeric_limits<int64_t>::max()}).value_or(-1);
    o.template_op = integer(rec, w, "template_op");
    if (const json* d = object(rec, w, "op")) o.op = *d;
    if (const json* c = object(rec, w, "chunk")) {
      const std::string cw = json_key(w, "chunk");
      o.chunk = ProfileChunk{doc.string(*c, cw, "pattern"), doc.integer(*c, cw, "step", kNonNegative),
                             doc.integer(*c, cw, "count", kNonNegative)};
    }
    o.inputs = tensors(rec, w, "inputs");
    o.outputs = tensors(rec, w, "outputs");
    if (doc.find(rec, w, "measured")) o.measured = doc.boolean(rec, w, "measured");
    if (doc.find(rec, w, "seeded_from_local")) o.seeded_from_local = doc.boolean(rec, w, "seeded_from_local");
    for_each_element(rec, w, "fused", [&](const json& f, const std::string& fw) {
      if (!f.is_string()) doc.fail(fw, "expected the name of an op the kernel fuses");
      o.fused.push_back(f.get<std::string>());
    });
    if (o.measured) o.time_us = summary(doc.object(rec, w, "time_us"), json_key(w, "time_us"));
    o.samples_us = times(rec, w, "samples_us");
    return o;
  }
};

}  // namespace

const std::optional<double>* TimeSummary::statistic(std::string_view name) const {
  if (name == "median") return &median;
  if (name == "min") return &min;
  if (name == "p10") return &p10;
  if (name == "p90") return &p90;
  if (name == "max") return &max;
  return nullptr;
}

std::optional<double>* TimeSummary::statistic(std::string_view name) {
  return const_cast<std::optional<double>*>(std::as_const(*this).statistic(name));
}

json op_descriptor(const OpKind& kind, int group_size) {
  return std::visit(
      [&](const auto& k) -> json {
        using K = std::decay_t<decltype(k)>;
        if constexpr (std::is_same_v<K, GemmOp>) {
          return {{"m", k.m},
                  {"n", k.n},
                  {"k", k.k},
                  {"a_dtype", std::string(to_string(k.a_dtype))},
                  {"b_dtype", std::string(to_string(k.b_dtype))},
                  {"c_dtype", std::string(to_string(k.c_dtype))},
                  {"trans_a", k.trans_a},
                  {"trans_b", k.trans_b},
                  {"accumulate", k.accumulate},
                  {"flops", k.flops()}};
        } else if constexpr (std::is_same_v<K, AttentionOp>) {
          json d = {{"batch", k.batch},           {"seq", k.seq},           {"n_heads", k.n_heads},
                    {"n_kv_heads", k.n_kv_heads}, {"head_dim", k.head_dim}, {"causal", k.causal},
                    {"backward", k.backward},     {"flops", k.flops()}};
          if (k.v_head_dim > 0) d["v_head_dim"] = k.v_head_dim;  // latent attention's value width
          return d;
        } else if constexpr (std::is_same_v<K, ElementwiseOp>) {
          json d = {{"fn", std::string(to_string(k.fn))}, {"bytes", k.bytes}, {"flops", k.flops}, {"dim", k.dim}};
          if (k.amax_of >= 0) d["amax_of"] = k.amax_of;  // a compiled Program's fused float8 amax
          return d;
        } else if constexpr (std::is_same_v<K, EmbeddingOp>) {
          return {{"tokens", k.tokens},
                  {"vocab_local", k.vocab_local},
                  {"dim_local", k.dim_local},
                  {"vocab_sharded", k.vocab_sharded},
                  {"backward", k.backward}};
        } else if constexpr (std::is_same_v<K, CrossEntropyOp>) {
          return {{"stage", std::string(to_string(k.stage))},
                  {"tokens", k.tokens},
                  {"vocab_local", k.vocab_local},
                  {"vocab_sharded", k.vocab_sharded}};
        } else if constexpr (std::is_same_v<K, CastFp8Op>) {
          return {{"stage", k.stage == CastFp8Op::Stage::amax ? "amax" : "cast"},
                  {"to", std::string(to_string(k.to))},
                  {"elements", k.elements},
                  {"rowwise", k.rowwise}};
        } else {
          return {{"collective", std::string(to_string(k.kind))},
                  {"group", std::string(to_string(k.group))},
                  {"group_size", group_size},
                  {"reduce", k.reduce == ReduceOp::sum ? "sum" : "max"},
                  {"dtype", std::string(to_string(k.dtype))},
                  {"bytes", k.bytes},
                  {"gather_dim", k.gather_dim},
                  {"scatter_dim", k.scatter_dim}};
        }
      },
      kind);
}

ProfileTensor profile_tensor(const std::string& name, const TensorDesc& d) {
  return {name,
          d.local_shape,
          d.global_shape,
          std::string(to_string(d.dtype)),
          to_string(d.placement),
          std::string(role_name(d.role))};
}

std::optional<ProfileChunk> profile_chunk(const ChunkRef& c) {
  switch (c.pattern) {
    case ChunkRef::Pattern::none:
      return std::nullopt;
    case ChunkRef::Pattern::all_gather:
      return ProfileChunk{"all_gather", c.step, c.count};
    case ChunkRef::Pattern::reduce_scatter:
      return ProfileChunk{"reduce_scatter", c.step, c.count};
  }
  return std::nullopt;
}

json profile_json(const Profile& p) {
  json j = json_header("tptune-profile", 1);
  if (!p.environment.is_null()) j["environment"] = p.environment;
  if (!p.program.is_null() || p.config_yaml || p.plan_yaml) {
    j["program"] = p.program;
    if (p.config_yaml) j["program"]["config_yaml"] = *p.config_yaml;
    if (p.plan_yaml) j["program"]["plan_yaml"] = *p.plan_yaml;
    if (p.hf_config_json) j["program"]["hf_config_json"] = *p.hf_config_json;
  }
  j["final_loss"] = p.final_loss ? json(*p.final_loss) : json(nullptr);
  if (p.timing)
    j["timing"] = {{"warmup", p.timing->warmup},
                   {"iters", p.timing->iters},
                   {"unit", p.timing->unit},
                   {"mode", p.timing->mode},
                   {"reduce_over_ranks", p.timing->reduce_over_ranks},
                   {"step_wall_mode", p.timing->step_wall_mode}};
  if (p.step_wall) {
    j["step_wall_us"] = summary_json(p.step_wall->time_us);
    j["step_wall_samples_us"] = p.step_wall->samples_us;
  }
  if (p.compute_wall) {
    j["compute_wall_us"] = summary_json(p.compute_wall->time_us);
    j["compute_wall_samples_us"] = p.compute_wall->samples_us;
  }
  if (p.local_shapes_of_tp) j["local_shapes_of_tp"] = *p.local_shapes_of_tp;
  if (!p.collectives.empty()) j["collectives"] = p.collectives;
  if (p.pipeline) j["pipeline"] = pipeline_json(*p.pipeline);
  json ops = json::array();
  for (const ProfileOp& o : p.ops) ops.push_back(op_json(o));
  j["ops"] = std::move(ops);
  return j;
}

double measured_time_us(const JsonDoc& doc, const json& v, const std::string& key) {
  if (!v.is_number()) doc.fail(key, "a number", v);
  const double d = v.get<double>();
  if (!(d >= 0)) doc.fail(key, fmt::format("expected a non-negative number, got {}", d));
  // Past 1000 s per op or step it is not a measurement (and 1e150 us squared overflowed the calibration fit).
  if (d > kMaxMeasuredTimeUs) doc.fail(key, fmt::format("expected a time of 0 .. 1e9 us (1000 s), got {}", d));
  return d;
}

Profile parse_profile(const json& j, const std::string& path) {
  const Reader r{JsonDoc(path)};
  const JsonDoc& doc = r.doc;
  const json* format = j.is_object() ? doc.find(j, "", "format") : nullptr;
  if (format && !format->is_string()) doc.fail("format", "a string", *format);
  if (!format || *format != "tptune-profile")
    throw Error(fmt::format("{}: expected a tp-run profile (\"format\": \"tptune-profile\")", path));
  // Compared as a JSON number, never narrowed first (4294967297 as an int is 1).
  const json* version = doc.find(j, "", "version");
  if (!version || !version->is_number_integer() || *version != 1)
    doc.fail("version", "expected 1 (the profile format this tp-plan reads)");
  const json& ops = doc.member(j, "", "ops");
  if (!ops.is_array() || ops.empty()) doc.fail("ops", "expected a non-empty list of op records");

  Profile p;
  if (const json* env = r.object(j, "", "environment")) {
    p.environment = *env;
    p.backend = r.string(*env, "environment", "backend");
    p.device = r.string(*env, "environment", "device");
    p.ranks = r.integer(*env, "environment", "ranks", limits::world_size);
  }
  if (const json* prog = r.object(j, "", "program")) {
    p.program = *prog;
    p.config_yaml = r.string(*prog, "program", "config_yaml");
    p.plan_yaml = r.string(*prog, "program", "plan_yaml");
    p.hf_config_json = r.string(*prog, "program", "hf_config_json");
  }
  if (const json* t = r.object(j, "", "timing")) {
    ProfileTiming timing;
    timing.warmup = r.integer(*t, "timing", "warmup").value_or(0);
    timing.iters = r.integer(*t, "timing", "iters").value_or(0);
    timing.unit = r.string(*t, "timing", "unit").value_or(timing.unit);
    timing.mode = r.string(*t, "timing", "mode").value_or(timing.mode);
    timing.reduce_over_ranks = r.string(*t, "timing", "reduce_over_ranks").value_or(timing.reduce_over_ranks);
    timing.step_wall_mode = r.string(*t, "timing", "step_wall_mode").value_or(timing.step_wall_mode);
    p.timing = timing;
  }
  if (const json* loss = doc.find(j, "", "final_loss")) {
    if (!loss->is_number()) doc.fail("final_loss", "a number or null", *loss);
    p.final_loss = loss->get<double>();
  }
  p.step_wall = r.wall(j, "step_wall_us", "step_wall_samples_us");
  p.compute_wall = r.wall(j, "compute_wall_us", "compute_wall_samples_us");
  p.local_shapes_of_tp = r.integer(j, "", "local_shapes_of_tp", limits::world_size);
  p.collectives = r.string(j, "", "collectives").value_or("");
  if (const json* pl = r.object(j, "", "pipeline")) p.pipeline = r.pipeline(*pl);
  p.ops.reserve(ops.size());
  for (size_t i = 0; i < ops.size(); ++i) p.ops.push_back(r.op(ops[i], fmt::format("ops[{}]", i)));
  return p;
}

Profile parse_profile_text(const std::string& text, const std::string& name) {
  return parse_profile(parse_json_text(text, name, "a tp-run profile"), name);
}

Profile load_profile(const std::string& path) {
  return parse_profile_text(read_input_file(path, "tp-run profile JSON", kMaxDataInputBytes), path);
}

}  // namespace tptune
