#include "sim/report/search_report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iterator>

#include "plans/export/torchtitan_recipe.h"
#include "plans/lower/lower.h"
#include "plans/lower/parameter_count.h"
#include "plans/util/error.h"
#include "plans/util/text_table.h"
#include "sim/report/html_report.h"
#include "sim/report/step_report.h"

namespace tptune {

namespace {

constexpr double kGiB = 1073741824.0;

template <typename... T>
void append(std::string& o, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(o), f, std::forward<T>(args)...);
}

double exposed_fraction(const StepReport& r) {
  return r.step_time_ms > 0 ? (r.exposed_tp_comm_ms + r.exposed_dp_comm_ms) / r.step_time_ms : 0;
}

// Multiplies a time in ms into ms per 1000 tokens per GPU: the tokens of the step per GPU are those
// tokens_per_second_per_gpu counts (ga x local_batch x seq_len / cp over tp x pp GPUs; ms_per_1k_tokens of
// html_report.h, which the report's bars use). Plans with different degrees and local batches compare on this scale
// (its inverse is the throughput).
double per_1k_tokens(const StepReport& s) { return ms_per_1k_tokens(s, 1.0); }

const char* yes_no(bool b) { return b ? "yes" : "no"; }

std::string plan_line(const Plan& p) {
  return fmt::format("tp {} x dp {}{}, {}, float8 {}, async TP {}, loss parallel {}, AC {}, local batch {}",
                     p.tp_degree, p.dp_shard,
                     (p.pp_degree > 1 ? fmt::format(" x pp {} ({}, microbatch {})", p.pp_degree,
                                                    to_string(p.pp_schedule), p.pp_microbatch_size)
                                      : std::string()) +
                         (p.cp_degree > 1 ? fmt::format(" x cp {} (ring {})", p.cp_degree, to_string(p.cp_rotate))
                                          : std::string()) +
                         (p.dp_replicate > 1 ? fmt::format(" x dp_replicate {} (HSDP)", p.dp_replicate) : "") +
                         (p.ep_degree > 1 ? fmt::format(", ep {} (efsdp {})", p.ep_degree,
                                                        int64_t{p.dp_shard} * p.cp_degree * p.tp_degree / p.ep_degree)
                                          : std::string()),
                     p.family, to_string(p.float8), p.async_tp ? "on" : "off", p.loss_parallel ? "on" : "off",
                     std::string(to_string(p.activation_checkpointing)) +
                         (p.ac_layers > 0 ? fmt::format(" on the first {} blocks", p.ac_layers) : std::string()),
                     p.local_batch_size) +
         (p.gradient_accumulation_steps > 1 ? fmt::format(" x {} microbatches", p.gradient_accumulation_steps) : "") +
         (p.seq_len > 0 ? fmt::format(", seq_len {}", p.seq_len) : "");
}

// What differs between the winner and a baseline, in words.
std::string changes(const Plan& from, const Plan& to) {
  std::vector<std::string> c;
  if (from.tp_degree != to.tp_degree) c.push_back(fmt::format("tp {} -> {}", from.tp_degree, to.tp_degree));
  if (from.framework != to.framework)
    c.push_back(fmt::format("framework {} -> {}", to_string(from.framework), to_string(to.framework)));
  if (from.dp_replicate != to.dp_replicate)
    c.push_back(fmt::format("dp_replicate {} -> {}", from.dp_replicate, to.dp_replicate));
  if (from.cp_degree != to.cp_degree) c.push_back(fmt::format("cp {} -> {}", from.cp_degree, to.cp_degree));
  if (from.ep_degree != to.ep_degree) c.push_back(fmt::format("ep {} -> {}", from.ep_degree, to.ep_degree));
  // Without TP on both sides, the module plan, async TP and loss parallel change nothing (the lowering drops them).
  const bool tp = from.tp_degree > 1 || to.tp_degree > 1;
  if (tp && from.family != to.family) c.push_back(fmt::format("{} -> {}", from.family, to.family));
  if (from.float8 != to.float8) c.push_back(fmt::format("float8 {}", to_string(to.float8)));
  if (tp && from.async_tp != to.async_tp) c.push_back(to.async_tp ? "async TP" : "no async TP");
  if (tp && from.loss_parallel != to.loss_parallel)
    c.push_back(to.loss_parallel ? "loss parallel" : "no loss parallel");
  if (from.activation_checkpointing != to.activation_checkpointing)
    c.push_back(
        fmt::format("AC {} -> {}", to_string(from.activation_checkpointing), to_string(to.activation_checkpointing)));
  if (from.ac_layers != to.ac_layers)
    c.push_back(to.ac_layers > 0 ? fmt::format("AC on the first {} blocks", to.ac_layers) : "AC on every block");
  if (from.local_batch_size != to.local_batch_size)
    c.push_back(fmt::format("local batch {} -> {}", from.local_batch_size, to.local_batch_size));
  if (from.seq_len != to.seq_len) c.push_back(fmt::format("seq_len {} -> {}", from.seq_len, to.seq_len));
  if (from.gradient_accumulation_steps != to.gradient_accumulation_steps)
    c.push_back(fmt::format("gradient accumulation steps {} -> {}", from.gradient_accumulation_steps,
                            to.gradient_accumulation_steps));
  return c.empty() ? "nothing (the same program)" : fmt::format("{}", fmt::join(c, ", "));
}

// By count, largest first; ties by text.
std::string pruned_lines(const SearchResult& r) {
  std::vector<std::pair<std::string, size_t>> v = pruned_by_text(r);
  std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  TextTable t({{"count", 6, Align::right}, {"reason", 0, Align::left, 2}});
  for (const auto& [reason, n] : v) t.row({std::to_string(n), reason});
  return t.str("  ", false);
}

// Whether the space searches HSDP replicate degrees (search.dp_replicate other than [1]): the tables then show the
// tp column as "tp x dp_replicate" ("8x2"); other reports read as before.
bool hsdp_space(const ResolvedSpace& s) { return s.dp_replicate.size() > 1 || s.dp_replicate.front() != 1; }
std::string tp_cell(const ResolvedSpace& s, const Candidate& x) {
  return hsdp_space(s) ? fmt::format("{}x{}", x.tp_degree, x.dp_replicate) : std::to_string(x.tp_degree);
}
int tp_width(const ResolvedSpace& s) { return hsdp_space(s) ? 5 : 3; }
// Whether the space searches context-parallel degrees (search.cp_degrees other than [1]): the tables then have a `cp`
// column after tp; other reports read as before.
bool cp_space(const ResolvedSpace& s) { return s.cp_degrees.size() > 1 || s.cp_degrees.front() != 1; }
// Whether the space searches expert-parallel degrees (search.ep_degrees other than [1]: a mixture-of-experts model's):
// the tables then have an `ep` column after tp (and cp); other reports read as before.
bool ep_space(const ResolvedSpace& s) { return s.ep_degrees.size() > 1 || s.ep_degrees.front() != 1; }
// Whether the space has pipeline candidates (search.pp_degrees): the tables then have a `pp` column first ("8 1F1B/2":
// degree, schedule and microbatch size, and "x4" for 4 stages per rank when not the schedule's default; "1" without
// PP); other reports read as before.
std::string pp_cell(const Candidate& x) {
  if (x.pp_degree <= 1) return "1";
  return fmt::format("{} {}/{}{}", x.pp_degree, to_string(x.pp_schedule), x.pp_microbatch_size,
                     x.pp_stages_per_rank > 0 ? fmt::format(" x{}", x.pp_stages_per_rank) : std::string());
}
// With search.gradient_accumulation the batch column is "local batch x gradient accumulation steps" ("2x8"); other
// reports read as before.
std::string batch_cell(const ResolvedSpace& s, const Candidate& x) {
  return s.gradient_accumulation ? fmt::format("{}x{}", x.local_batch_size, x.gradient_accumulation_steps)
                                 : std::to_string(x.local_batch_size);
}
int batch_width(const ResolvedSpace& s) { return s.gradient_accumulation ? 8 : 5; }
// With more than one search.seq_lens, a `seq` column after the batch; other reports read as before.
bool seq_column(const ResolvedSpace& s) { return s.seq_lens.size() > 1; }

// The columns the ranking and the Pareto front share, from tp to batch (and seq), and their cells for a candidate.
std::vector<TextColumn> plan_columns(const ResolvedSpace& s) {
  std::vector<TextColumn> c = {{"tp", static_cast<size_t>(tp_width(s)), Align::right},
                               {"plan", 18, Align::left, 2},
                               {"float8", 10},
                               {"async", 5},
                               {"loss", 5},
                               {"AC", 9},
                               {"batch", static_cast<size_t>(batch_width(s)), Align::right}};
  if (seq_column(s)) c.push_back({"seq", 6, Align::right});
  if (ep_space(s)) c.insert(c.begin() + 1, TextColumn{"ep", 3, Align::right});
  if (cp_space(s)) c.insert(c.begin() + 1, TextColumn{"cp", 2, Align::right});
  if (s.searches_pp()) c.insert(c.begin(), TextColumn{"pp", 20, Align::left});
  return c;
}
std::vector<std::string> plan_cells(const ResolvedSpace& s, const Candidate& x) {
  std::vector<std::string> c = {tp_cell(s, x),
                                s.families[static_cast<size_t>(x.family)].name,
                                std::string(to_string(x.float8)),
                                yes_no(x.async_tp),
                                yes_no(x.loss_parallel),
                                ac_label(x),
                                batch_cell(s, x)};
  if (seq_column(s)) c.push_back(std::to_string(x.seq_len));
  if (ep_space(s)) c.insert(c.begin() + 1, std::to_string(x.ep_degree));
  if (cp_space(s)) c.insert(c.begin() + 1, std::to_string(x.cp_degree));
  if (s.searches_pp()) c.insert(c.begin(), pp_cell(x));
  return c;
}

std::string header(const Config& cfg, const SearchResult& r) {
  const ClusterSpec& c = r.cluster;
  std::string o;
  append(o, "{} (seq {}) on {} x {} ({} node{} x {}): {} candidates, {} feasible, {:.0f} ms on {} thread{}\n",
         cfg.model.name, fmt::join(r.space.seq_lens, ", "), c.world_size(), c.gpu.name, c.nodes,
         c.nodes == 1 ? "" : "s", c.gpus_per_node, r.evaluated, r.feasible, r.elapsed_ms, r.threads,
         r.threads == 1 ? "" : "s");
  append(o, "parameters: {} in the model\n", with_thousands(cfg.model.total_parameters()));
  append(o, "objective: {}, memory headroom {:g} GiB of {:g} GiB\n", to_string(r.space.objective),
         r.space.memory_headroom_gib, c.gpu.memory_GiB);
  if (r.space.global_batch_size > 0 || r.space.min_tokens_per_second_per_gpu > 0 || r.space.gpu_hour_price > 0) {
    std::vector<std::string> parts;
    if (r.space.global_batch_size > 0)
      parts.push_back(fmt::format("global batch {} sequences{}", r.space.global_batch_size,
                                  r.space.gradient_accumulation
                                      ? " (gradient accumulation: local batch x dp divides it; batch column: local "
                                        "batch x microbatches)"
                                      : ""));
    if (r.space.min_tokens_per_second_per_gpu > 0)
      parts.push_back(fmt::format("at least {:g} tokens/s per GPU", r.space.min_tokens_per_second_per_gpu));
    if (r.space.gpu_hour_price > 0) parts.push_back(fmt::format("USD {:g} per GPU-hour", r.space.gpu_hour_price));
    append(o, "constraints: {}\n", fmt::join(parts, ", "));
  }
  if (hsdp_space(r.space))
    append(o, "HSDP: dp_replicate {} (dp_shard = world / (tp x dp_replicate)); tp column: tp x dp_replicate\n",
           fmt::format("[{}]", fmt::join(r.space.dp_replicate, ", ")));
  if (!r.pruned.empty()) {
    append(o, "pruned:\n");
    o += pruned_lines(r);
  }
  return o;
}

}  // namespace

Plan result_plan(const SearchResult& r, int index) {
  return candidate_plan(r.space, r.results.at(static_cast<size_t>(index)).candidate);
}

Training result_training(const Config& cfg, const SearchResult& r, int index) {
  return candidate_training(cfg.training, r.results.at(static_cast<size_t>(index)).candidate);
}

std::vector<Baseline> search_baselines(const Config& cfg, const SearchResult& r, const CostParams& cost) {
  const CandidateResult* w = r.winner();
  if (!w) return {};
  Config at_winner = cfg;  // the baselines train at the winner's seq_len
  at_winner.training = result_training(cfg, r, r.ranking[0]);
  std::vector<Baseline> out = plan_baselines(at_winner, r.cluster, w->candidate.tp_degree, r.space.memory_headroom_gib,
                                             cost, parse_framework(r.space.framework, "search.framework"),
                                             r.space.gradient_accumulation ? r.space.global_batch_size : 0);
  if (r.space.searches_seq_len())
    for (Baseline& b : out) b.plan.seq_len = w->candidate.seq_len;
  return out;
}

std::vector<Baseline> plan_baselines(const Config& cfg, const ClusterSpec& cluster, int winner_tp, double headroom_gib,
                                     const CostParams& cost, Framework framework, int64_t global_batch_size) {
  std::vector<Baseline> out;
  const int world = cluster.world_size();
  const int seed_tp = std::min(cluster.gpus_per_node, world);
  const TorchtitanRecipe* recipe = torchtitan_recipe(cfg.model);
  for (const bool is_vanilla : {true, false}) {
    Baseline b;
    Plan base;
    base.tp_degree = is_vanilla ? seed_tp : winner_tp;
    base.activation_checkpointing = cfg.training.activation_checkpointing;
    base.local_batch_size = cfg.training.local_batch_size;
    base.loss_parallel = !is_vanilla;
    base.framework = framework;  // the baselines of the plan's own family
    Training training = cfg.training;
    if (is_vanilla) {
      b.name = "vanilla";
    } else if (recipe) {
      // What torchtitan 0.3 trains with the model's recipe and nothing changed (plans/export/torchtitan_recipe.h), in
      // its own framework, at the run's seq_len (the recipes' 8192 is the data's length, not a parallelism choice).
      b.name = "torchtitan default";
      b.recipe = recipe->function;
      base.framework = Framework::torchtitan_0_3;
      base.tp_degree = recipe->tp_degree;
      base.local_batch_size = recipe->local_batch_size;
      base.activation_checkpointing = recipe->activation_checkpointing;
      base.float8 = recipe->float8;
      base.async_tp = recipe->async_tp;
      training.compile = recipe->compile;
    } else {
      // No recipe has this model: the preset torchtitan's apply_tp applies, with the config's training section, at
      // the winner's TP degree, and named for what it is.
      b.name = "sequence_parallel preset";
    }
    base.dp_shard = std::max(1, world / base.tp_degree);
    // local batch <= 2^16 and dp_shard <= world <= 2^20: no overflow.
    if (const int64_t per_microbatch = base.local_batch_size * base.dp_shard;
        global_batch_size > 0 && global_batch_size % per_microbatch == 0)
      base.gradient_accumulation_steps = global_batch_size / per_microbatch;
    b.plan = preset_plan(is_vanilla ? "vanilla" : "sequence_parallel", base);
    try {
      const Program p = lower(cfg.model, training, b.plan);
      b.report = simulate(p, cluster, cost);
      b.fits = fits_with_headroom(b.report.memory, headroom_gib);
    } catch (const Error& e) {
      b.error = e.what();
    }
    out.push_back(std::move(b));
  }
  return out;
}

std::string search_table(const Config& cfg, const SearchResult& r, size_t k) {
  std::string o = header(cfg, r);
  if (r.ranking.empty()) return o;
  const size_t n = std::min(k, r.ranking.size());
  append(o, "\ntop {} of {} by {}:\n", n, r.feasible, to_string(r.space.objective));
  const bool priced = r.space.gpu_hour_price > 0;
  std::vector<TextColumn> columns = {{"#", 4, Align::right}};
  for (TextColumn& c : plan_columns(r.space)) columns.push_back(std::move(c));
  for (const char* h : {"step ms", "tok/s/GPU"}) columns.push_back({h, 10, Align::right});
  columns.push_back({"MFU", 6, Align::right});
  for (const char* h : {"mem GiB", "exp comm"}) columns.push_back({h, 8, Align::right});
  if (priced) columns.push_back({"USD/1M tok", 11, Align::right});
  TextTable t(std::move(columns));
  for (size_t i = 0; i < n; ++i) {
    const CandidateResult& c = r.results[static_cast<size_t>(r.ranking[i])];
    const StepReport& s = c.report;
    std::vector<std::string> cells = {std::to_string(i + 1)};
    for (std::string& v : plan_cells(r.space, c.candidate)) cells.push_back(std::move(v));
    for (std::string v : {fmt::format("{:.1f}", s.step_time_ms), fmt::format("{:.0f}", s.tokens_per_second_per_gpu),
                          fmt::format("{:.1f}%", 100 * s.mfu), fmt::format("{:.1f}", s.memory.peak / kGiB),
                          fmt::format("{:.1f}%", 100 * exposed_fraction(s))})
      cells.push_back(std::move(v));
    if (priced) cells.push_back(fmt::format("{:.3f}", cost_per_million_tokens(s, r.space.gpu_hour_price)));
    t.row(std::move(cells));
  }
  return o + t.str();
}

double cost_per_million_tokens(const StepReport& s, double gpu_hour_price) {
  // USD per GPU-hour / (tokens per GPU per second x 3600 s) x 1e6 tokens.
  return s.tokens_per_second_per_gpu > 0 ? gpu_hour_price / (s.tokens_per_second_per_gpu * 3600) * 1e6 : 0;
}

std::string pareto_text(const SearchResult& r) {
  if (r.pareto.empty()) return {};
  std::string o;
  append(o, "\nPareto front (no other feasible plan is both faster and smaller), by peak memory:\n");
  std::vector<TextColumn> columns = plan_columns(r.space);
  columns.push_back({"tok/s/GPU", 10, Align::right});
  columns.push_back({"mem GiB", 8, Align::right});
  TextTable t(std::move(columns));
  for (int i : r.pareto) {
    const CandidateResult& c = r.results[static_cast<size_t>(i)];
    std::vector<std::string> cells = plan_cells(r.space, c.candidate);
    cells.push_back(fmt::format("{:.0f}", c.report.tokens_per_second_per_gpu));
    cells.push_back(fmt::format("{:.1f}", c.report.memory.peak / kGiB));
    t.row(std::move(cells));
  }
  return o + t.str();
}

std::string explain_winner(const SearchResult& r, const std::vector<Baseline>& baselines) {
  const CandidateResult* w = r.winner();
  if (!w) return {};
  const Plan wp = result_plan(r, r.ranking[0]);
  std::string o;
  append(o, "\nwinner: {}\n", plan_line(wp));
  append(o, "parameters per GPU: {} of {} ({})\n", with_thousands(w->report.parameters.per_rank),
         with_thousands(w->report.parameters.total),
         shard_text(w->report.parameters, wp.tp_degree, wp.dp_shard, wp.cp_degree));
  append(o, "\n{:<26} {:>10} {:>10} {:>6} {:>8}   ms per 1k tokens per GPU: {:>8} {:>11} {:>11}\n", "", "step ms",
         "tok/s/GPU", "MFU", "mem GiB", "compute", "exposed TP", "exposed DP");
  auto row = [&](const std::string& name, const StepReport& s, bool fits) {
    const double k = per_1k_tokens(s);
    append(o, "{:<26} {:>10.1f} {:>10.0f} {:>5.1f}% {:>8.1f}{}                          {:>8.2f} {:>11.2f} {:>11.2f}\n",
           name, s.step_time_ms, s.tokens_per_second_per_gpu, 100 * s.mfu, s.memory.peak / kGiB, fits ? " " : "!",
           s.compute_ms * k, s.exposed_tp_comm_ms * k, s.exposed_dp_comm_ms * k);
  };
  row("winner", w->report, true);
  for (const Baseline& bl : baselines) {
    if (bl.error.empty())
      row(fmt::format("{} (tp {})", bl.name, bl.plan.tp_degree), bl.report, bl.fits);
    else
      append(o, "{:<26} cannot run: {}\n", bl.name, bl.error);
  }
  bool any_oom = false;
  for (const Baseline& bl : baselines) any_oom |= bl.error.empty() && !bl.fits;
  if (any_oom) append(o, "(! does not fit in GPU memory with the headroom)\n");
  for (const Baseline& bl : baselines) {
    if (!bl.error.empty() || bl.report.tokens_per_second_per_gpu <= 0) continue;
    const StepReport& s = bl.report;
    const double wk = per_1k_tokens(w->report), bk = per_1k_tokens(s);
    auto delta = [&](const char* what, double from_ms, double to_ms) {
      return fmt::format("{} {:.2f} -> {:.2f} ({:+.2f})", what, from_ms * bk, to_ms * wk, to_ms * wk - from_ms * bk);
    };
    append(o, "\nvs {}{}: {:.2f}x tokens/s per GPU; changed: {}\n", bl.name,
           bl.recipe.empty() ? "" : fmt::format(" (torchtitan 0.3's {} recipe)", bl.recipe),
           w->report.tokens_per_second_per_gpu / s.tokens_per_second_per_gpu, changes(bl.plan, wp));
    append(o, "  ms per 1k tokens per GPU: {}; {}; {}\n", delta("compute", s.compute_ms, w->report.compute_ms),
           delta("exposed TP comm", s.exposed_tp_comm_ms, w->report.exposed_tp_comm_ms),
           delta("exposed DP comm", s.exposed_dp_comm_ms, w->report.exposed_dp_comm_ms));
  }
  return o;
}

std::vector<std::pair<std::string, size_t>> pruned_by_text(const SearchResult& r) {
  std::vector<std::pair<std::string, size_t>> v;
  for (const auto& [cause, n] : r.pruned) v.emplace_back(to_string(cause), n);
  std::sort(v.begin(), v.end());  // the texts are distinct
  return v;
}

std::string nothing_fits_text(const Config& cfg, const SearchResult& r, size_t k) {
  std::string o = header(cfg, r);
  append(o, "\nno candidate fits: every one of the {} was pruned.\n", r.evaluated);
  if (r.closest.empty()) return o;
  append(o, "closest candidates:\n");
  const size_t n = std::min(k, r.closest.size());
  for (size_t i = 0; i < n; ++i) {
    const CandidateResult& c = r.results[static_cast<size_t>(r.closest[i])];
    append(o, "  {}\n    {}: {}\n", describe(r.space, c.candidate), to_string(c.pruned), c.detail);
  }
  return o;
}

nlohmann::json plan_summary_json(const Plan& p) {
  nlohmann::json j = plan_toggles_json(p);
  j["family"] = p.family;
  if (p.pp_degree > 1 && p.pp_stages_per_rank > 0) j["pp_stages_per_rank"] = p.pp_stages_per_rank;  // 0: the default
  return j;
}

namespace {

nlohmann::json metrics_json(const StepReport& s) {
  return {{"step_time_ms", s.step_time_ms},
          {"tokens_per_second_per_gpu", s.tokens_per_second_per_gpu},
          {"mfu", s.mfu},
          {"peak_memory_gib", s.memory.peak / kGiB},
          {"parameters", {{"total", s.parameters.total}, {"per_gpu", s.parameters.per_rank}}},
          {"exposed_comm_fraction", exposed_fraction(s)},
          {"breakdown_ms",
           {{"compute", s.compute_ms},
            {"exposed_tp_comm", s.exposed_tp_comm_ms},
            {"exposed_dp_comm", s.exposed_dp_comm_ms}}}};
}

}  // namespace

nlohmann::json search_json(const SearchResult& r, const std::vector<Baseline>& baselines, size_t k) {
  nlohmann::json j;
  j["evaluated"] = r.evaluated;
  if (r.space.searches_seq_len()) j["seq_lens"] = r.space.seq_lens;
  j["feasible"] = r.feasible;
  j["pruned"] = nlohmann::json::object();
  for (const auto& [reason, n] : r.pruned) j["pruned"][to_string(reason)] = n;
  j["elapsed_ms"] = r.elapsed_ms;
  j["threads"] = r.threads;
  j["objective"] = std::string(to_string(r.space.objective));
  j["top"] = nlohmann::json::array();
  for (size_t i = 0; i < std::min(k, r.ranking.size()); ++i) {
    const CandidateResult& c = r.results[static_cast<size_t>(r.ranking[i])];
    nlohmann::json e = metrics_json(c.report);
    if (r.space.gpu_hour_price > 0)
      e["cost_per_million_tokens_usd"] = cost_per_million_tokens(c.report, r.space.gpu_hour_price);
    e["rank"] = i + 1;
    e["plan"] = plan_summary_json(result_plan(r, r.ranking[i]));
    j["top"].push_back(std::move(e));
  }
  j["pareto"] = nlohmann::json::array();
  for (int i : r.pareto) {
    const CandidateResult& c = r.results[static_cast<size_t>(i)];
    j["pareto"].push_back({{"plan", plan_summary_json(result_plan(r, i))},
                           {"tokens_per_second_per_gpu", c.report.tokens_per_second_per_gpu},
                           {"peak_memory_gib", c.report.memory.peak / kGiB}});
  }
  j["lowering"] = {{"lowered", r.lowered}, {"finished", r.finished}, {"patched", r.patched}};
  j["phases_ms"] = nlohmann::json::object();
  for (int p = 0; p < kSearchPhases; ++p)
    j["phases_ms"][std::string(to_string(static_cast<SearchPhase>(p)))] = r.phases.ns[static_cast<size_t>(p)] / 1e6;
  if (!baselines.empty()) {
    j["baselines"] = nlohmann::json::array();
    const CandidateResult* w = r.winner();
    for (const Baseline& b : baselines) {
      nlohmann::json e = b.error.empty() ? metrics_json(b.report) : nlohmann::json{{"error", b.error}};
      e["name"] = b.name;
      if (!b.recipe.empty()) e["recipe"] = b.recipe;  // torchtitan 0.3's config_registry function
      e["plan"] = plan_summary_json(b.plan);
      if (b.error.empty()) {
        e["fits_in_memory"] = b.fits;
        if (w && b.report.tokens_per_second_per_gpu > 0)
          e["winner_speedup"] = w->report.tokens_per_second_per_gpu / b.report.tokens_per_second_per_gpu;
      }
      j["baselines"].push_back(std::move(e));
    }
  }
  if (r.ranking.empty()) {
    j["closest"] = nlohmann::json::array();
    for (size_t i = 0; i < std::min(k, r.closest.size()); ++i) {
      const CandidateResult& c = r.results[static_cast<size_t>(r.closest[i])];
      nlohmann::json e{{"plan", plan_summary_json(result_plan(r, r.closest[i]))},
                       {"reason", to_string(c.pruned)},
                       {"detail", c.detail}};
      if (c.has_memory) e["peak_memory_gib"] = c.report.memory.peak / kGiB;
      j["closest"].push_back(std::move(e));
    }
  }
  return j;
}

}  // namespace tptune
