#include "sim/report/trace.h"

#include <fmt/format.h>

#include "plans/util/checked_math.h"
#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

namespace {

// Wait's enumerators, in declaration order.
constexpr std::string_view kWaitNames[] = {"none",
                                           "stream",
                                           "compute",
                                           "tp comm",
                                           "dp comm",
                                           "issued by the previous block (fsdp prefetch)",
                                           "dp_replicate comm",
                                           "host dispatch",
                                           "cp comm",
                                           "ep comm"};
static_assert(std::size(kWaitNames) == enum_count(Wait::ep));

std::string_view wait_name(Wait w) { return name_of(kWaitNames, w); }

}  // namespace

void check_listed_events(int64_t n, std::string_view option, std::string_view what, std::string_view how) {
  if (n > kMaxListedEvents)
    throw Error(fmt::format("{}: {} {}, more than {}, the most one output lists (docs/file-formats.md); {}", option, n,
                            what, kMaxListedEvents, how));
}

int64_t chrome_trace_op_events(const Timeline& tl) {
  int64_t n = 0;
  for (const SegmentTimes& st : tl.segments)
    n = checked_add(n, checked_mul(st.instances, st.ops, "trace events"), "trace events");
  return n;
}

int64_t chrome_trace_events(const Program& p, const OpCosts& costs, const Timeline& tl) {
  int64_t n = chrome_trace_op_events(tl);
  for (size_t s = 0; s < p.segments.size() && s < tl.segments.size(); ++s)
    for (size_t j = 0; j < p.segments[s].ops.size(); ++j) {
      const FsdpCopyShare c = fsdp_copy_share(costs, s, j);
      const int slices = (c.before_us > 0 ? 1 : 0) + (c.after_us > 0 ? 1 : 0);
      n = checked_add(n, checked_mul(tl.segments[s].instances, slices, "trace events"), "trace events");
    }
  return n;
}

nlohmann::json chrome_trace(const Program& p, const OpCosts& costs, const Timeline& tl) {
  using nlohmann::json;
  check_listed_events(chrome_trace_events(p, costs, tl), "--trace",
                      fmt::format("op events (a step of {} layers)", p.model.n_layers),
                      "a model with fewer layers or a smaller context-parallel degree has fewer; or leave --trace out");
  json events = json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", "rank 0 (simulated)"}}}});
  // The HSDP replicate stream's track only when the Program has one (traces of other plans stay as they were).
  // Likewise the CP stream's only for context-parallel Programs.
  const int streams = p.ep > 1             ? kStreams
                      : p.cp > 1           ? static_cast<int>(Stream::cp) + 1
                      : p.dp_replicate > 1 ? static_cast<int>(Stream::dp_replicate) + 1
                                           : static_cast<int>(Stream::dp) + 1;
  for (int s = 0; s < streams; ++s) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", 0},
                      {"tid", s},
                      {"args", {{"name", std::string(to_string(static_cast<Stream>(s)))}}}});
    events.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 0}, {"tid", s}, {"args", {{"sort_index", s}}}});
  }
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const Segment& seg = p.segments[s];
    const SegmentTimes& st = tl.segments[s];
    for (int i = 0; i < st.instances; ++i) {
      const int layer = instance_layer(p, seg, i);
      for (int j = 0; j < st.ops; ++j) {
        const Op& op = seg.ops[static_cast<size_t>(j)];
        OpTime t = st.time(i, j);
        json args = {{"phase", std::string(to_string(op.phase))},
                     {"kind", std::string(kind_name(op.kind))},
                     {"segment", to_string(seg.kind)},
                     {"waited_for", std::string(wait_name(t.wait))}};
        if (auto* c = std::get_if<CollectiveOp>(&op.kind)) {
          args["collective"] = std::string(to_string(c->kind));
          args["group"] = std::string(to_string(c->group));
          args["bytes"] = c->bytes;
        }
        if (auto* g = std::get_if<GemmOp>(&op.kind)) args["mnk"] = fmt::format("{}x{}x{}", g->m, g->n, g->k);
        if (op.chunk.pattern != ChunkRef::Pattern::none)
          args["chunk"] = fmt::format("{}/{}", op.chunk.step, op.chunk.count);
        const FsdpCopyShare copy = fsdp_copy_share(costs, s, static_cast<size_t>(j));
        const double duration = costs.duration_us[s][static_cast<size_t>(j)];
        // A copy's slice: on the op's stream, next to it, named for the copy and the op it runs beside.
        auto copy_slice = [&](bool before, double ts, double dur) {
          events.push_back({{"name", layer_fqn(layer, std::string(fsdp_copy_name(op, before)))},
                            {"cat", std::string(to_string(op.phase))},
                            {"ph", "X"},
                            {"pid", 0},
                            {"tid", static_cast<int>(stream_of(op))},
                            {"ts", ts},
                            {"dur", dur},
                            {"args",
                             {{"phase", std::string(to_string(op.phase))},
                              {"kind", "fsdp_copy"},
                              {"segment", to_string(seg.kind)},
                              {before ? "before" : "after", layer_fqn(layer, op.name)}}}});
        };
        if (copy.before_us > 0) copy_slice(true, t.start, copy.before_us);
        events.push_back({{"name", layer_fqn(layer, op.name)},
                          {"cat", std::string(to_string(op.phase))},
                          {"ph", "X"},
                          {"pid", 0},
                          {"tid", static_cast<int>(stream_of(op))},
                          {"ts", t.start + copy.before_us},
                          {"dur", duration - copy.before_us - copy.after_us},
                          {"args", std::move(args)}});
        if (copy.after_us > 0) copy_slice(false, t.start + duration - copy.after_us, copy.after_us);
      }
    }
  }
  return json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace tptune
