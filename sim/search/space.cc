#include "sim/search/space.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "plans/checked_math.h"
#include "plans/error.h"
#include "plans/limits.h"
#include "plans/module_names.h"

namespace tptune {

std::vector<int> default_tp_degrees(const Cluster& c) {
  std::vector<int> out;
  const int world = c.world_size(), cap = 2 * c.gpus_per_node;
  for (int d = 1; d <= world && d <= cap; ++d)
    if (world % d == 0) out.push_back(d);
  if (out.empty()) out.push_back(1);
  return out;
}

ResolvedSpace resolve_space(const Config& cfg) {
  const SearchSpace& s = cfg.search;
  ResolvedSpace r;
  static_cast<SearchSpace&>(r) = s;
  r.world_size = cfg.cluster.world_size();
  if (r.tp_degrees.empty()) r.tp_degrees = default_tp_degrees(cfg.cluster);
  if (r.dp_replicate.empty()) r.dp_replicate = {1};
  if (r.cp_degrees.empty()) r.cp_degrees = {1};
  if (r.pp_degrees.empty()) r.pp_degrees = {1};
  if (r.pp_schedules.empty()) r.pp_schedules = {PipelineScheduleKind::one_f_one_b};
  if (r.pp_microbatch_sizes.empty()) r.pp_microbatch_sizes = {1};
  if (r.pp_stages_per_rank.empty()) r.pp_stages_per_rank = {0};
  // The pipeline candidates are evaluated one by one (sim/pipeline_step.h): none of the pp 1 space's shortcuts.
  if (r.searches_pp() && (!r.ac_layers.empty() || r.max_local_batch_size > 0))
    throw Error(
        fmt::format("{}: search.pp_degrees with {}: not searched together yet (the pipeline candidates have "
                    "no block-count sweep nor batch bisection); list local_batch_sizes and no ac_layers",
                    cfg.path, !r.ac_layers.empty() ? "search.ac_layers" : "search.max_local_batch_size"));
  for (const std::string& p : s.presets) {
    PlanFamily f;
    f.name = p;
    f.preset = true;
    f.sequence_parallel = p == "sequence_parallel";
    r.families.push_back(std::move(f));
  }
  for (const std::string& path : s.plan_files) {
    PlanFamily f;
    f.preset = false;
    f.file_plan = load_plan(path);
    check_plan_modules(f.file_plan, cfg.model);  // refused once, not pruned as every candidate of the file
    // The candidates take every toggle from the space (the pipeline from its pp lists): a file's pipeline would be
    // dropped.
    if (f.file_plan.pp_degree > 1)
      throw Error(
          fmt::format("{}: pp_degree {}: the search's candidates take the pipeline from search.pp_degrees, "
                      "pp_schedules and pp_microbatch_sizes, so this plan's would be dropped; list it there",
                      plan_key_origin(f.file_plan, "pp_degree"), f.file_plan.pp_degree));
    f.name = f.file_plan.family != "custom" && !f.file_plan.family.empty()
                 ? f.file_plan.family
                 : std::filesystem::path(path).stem().string();
    f.file_plan.family = f.name;
    r.families.push_back(std::move(f));
  }
  r.config_seq_len = cfg.training.seq_len;
  if (r.seq_lens.empty()) r.seq_lens = {cfg.training.seq_len};
  if (!r.ac_layers.empty() && r.max_local_batch_size > 0)
    throw Error(
        fmt::format("{}: search.ac_layers with search.max_local_batch_size: not supported (the block-count "
                    "sweep prices every k from one lowering at a given batch); give local_batch_sizes",
                    cfg.path));
  return r;
}

namespace {

// The loss-parallel values searched for a family: the space's for presets, the file's own for plan files.
std::vector<bool> loss_parallel_values(const ResolvedSpace& s, const PlanFamily& f) {
  return f.preset ? s.loss_parallel : std::vector<bool>{f.file_plan.loss_parallel};
}

}  // namespace

size_t ResolvedSpace::size() const {
  int64_t per_family = 0;
  for (const PlanFamily& f : families) per_family += static_cast<int64_t>(loss_parallel_values(*this, f).size());
  auto n = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  // Lists as long as a config file can make them: a checked product, at most limits::max_search_candidates.
  const int64_t total = checked_mul({n(seq_lens), n(tp_degrees), n(dp_replicate), n(cp_degrees), per_family, n(float8),
                                     n(async_tp), n(activation_checkpointing), n(local_batch_sizes)},
                                    "search space size (the product of the search lists' lengths)");
  if (total > limits::max_search_candidates)
    throw Error(
        fmt::format("search space size (the product of the search lists' lengths): {} candidates; expected at "
                    "most {}: shorten the lists of the search section",
                    total, limits::max_search_candidates));
  return static_cast<size_t>(total);
}

int64_t ResolvedSpace::candidates() const {
  const int64_t base = static_cast<int64_t>(size());
  if (ac_layers.empty()) return base;
  const int64_t per_policy = base / static_cast<int64_t>(std::max<size_t>(activation_checkpointing.size(), 1));
  const int64_t policies =
      static_cast<int64_t>(std::count_if(activation_checkpointing.begin(), activation_checkpointing.end(),
                                         [](ActivationCheckpointing a) { return a != ActivationCheckpointing::none; }));
  const int64_t swept = checked_mul({per_policy, policies, static_cast<int64_t>(ac_layers.size())},
                                    "search space size with search.ac_layers");
  const int64_t total = checked_add(base, swept, "search space size with search.ac_layers");
  if (total > limits::max_swept_candidates)
    throw Error(
        fmt::format("search space size with search.ac_layers: {} candidates; expected at most {}: shorten "
                    "the lists of the search section",
                    total, limits::max_swept_candidates));
  return total;
}

std::vector<Candidate> enumerate_candidates(const ResolvedSpace& s) {
  std::vector<Candidate> out;
  out.reserve(s.size());
  for (int64_t seq : s.seq_lens)
    for (int tp : s.tp_degrees)
      for (int rep : s.dp_replicate)
        for (int cp : s.cp_degrees)
          for (size_t fam = 0; fam < s.families.size(); ++fam)
            for (Float8Recipe f8 : s.float8)
              for (bool async : s.async_tp)
                for (bool lp : loss_parallel_values(s, s.families[fam]))
                  for (ActivationCheckpointing ac : s.activation_checkpointing)
                    for (int64_t lbs : s.local_batch_sizes) {
                      Candidate c;
                      c.index = static_cast<int>(out.size());
                      c.tp_degree = tp;
                      // 0: tp x cp x dp_replicate does not divide the world (each at most 2^20: no overflow)
                      const int64_t per_shard = static_cast<int64_t>(tp) * rep * cp;
                      c.dp_shard = per_shard > 0 && s.world_size % per_shard == 0
                                       ? static_cast<int>(s.world_size / per_shard)
                                       : 0;
                      c.dp_replicate = rep;
                      c.cp_degree = cp;
                      c.family = static_cast<int>(fam);
                      c.float8 = f8;
                      c.async_tp = async;
                      c.loss_parallel = lp;
                      c.activation_checkpointing = ac;
                      c.local_batch_size = lbs;
                      c.seq_len = seq;
                      // lbs <= 2^16, dp x rep <= world <= 2^20: no overflow.
                      if (s.gradient_accumulation && s.global_batch_size > 0 && c.dp_shard > 0) {
                        const int64_t per_microbatch = lbs * c.dp_shard * rep;
                        if (s.global_batch_size % per_microbatch == 0)
                          c.gradient_accumulation_steps = s.global_batch_size / per_microbatch;
                      }
                      out.push_back(c);
                    }
  return out;
}

std::vector<Candidate> pipeline_candidates(const ResolvedSpace& s, const std::vector<Candidate>& base,
                                           int first_index) {
  std::vector<Candidate> out;
  int index = first_index;
  for (const Candidate& b : base)
    for (int pp : s.pp_degrees) {
      if (pp <= 1) continue;
      for (PipelineScheduleKind kind : s.pp_schedules)
        for (int spr : s.pp_stages_per_rank)
          for (int64_t mbs : s.pp_microbatch_sizes) {
            Candidate c = b;
            c.index = index++;
            c.pp_degree = pp;
            c.pp_schedule = kind;
            c.pp_stages_per_rank = spr;
            c.pp_microbatch_size = mbs;
            // Each degree at most 2^20 and their product checked: no overflow.
            const int64_t per_shard = checked_mul({pp, c.tp_degree, c.cp_degree, c.dp_replicate}, "pp x tp x cp x dp");
            c.dp_shard = s.world_size % per_shard == 0 ? static_cast<int>(s.world_size / per_shard) : 0;
            c.gradient_accumulation_steps = 1;
            if (s.gradient_accumulation && s.global_batch_size > 0 && c.dp_shard > 0) {
              const int64_t per_microbatch = c.local_batch_size * c.dp_shard * c.dp_replicate;
              if (s.global_batch_size % per_microbatch == 0)
                c.gradient_accumulation_steps = s.global_batch_size / per_microbatch;
            }
            out.push_back(c);
          }
    }
  return out;
}

Plan candidate_plan(const ResolvedSpace& s, const Candidate& c) {
  const PlanFamily& f = s.families.at(static_cast<size_t>(c.family));
  Plan p = f.preset ? Plan{} : f.file_plan;
  if (f.preset) p.framework = parse_framework(s.framework, "search.framework");
  const int64_t file_seq_len = p.seq_len;
  p.toggles() = c.toggles();
  p.dp_shard = std::max(c.dp_shard, 1);
  if (!s.searches_seq_len()) p.seq_len = file_seq_len;  // the family's own (0 for presets)
  return f.preset ? preset_plan(f.name, p) : p;
}

Training candidate_training(const Training& t, const Candidate& c) {
  Training out = t;
  out.seq_len = c.seq_len;
  return out;
}

std::string ac_label(const Candidate& c) {
  if (c.ac_layers <= 0) return std::string(to_string(c.activation_checkpointing));
  return fmt::format("{} {}", c.activation_checkpointing == ActivationCheckpointing::selective ? "sel" : "full",
                     c.ac_layers);
}

std::string describe(const ResolvedSpace& s, const Candidate& c) {
  return fmt::format(
      "tp {}{}{}{} {} float8={} async_tp={} loss_parallel={} ac={}{} local_batch={}{}{}", c.tp_degree,
      c.pp_degree > 1 ? fmt::format(" pp {} {}{} microbatch {}", c.pp_degree, to_string(c.pp_schedule),
                                    c.pp_stages_per_rank > 0 ? fmt::format(" x{} stages", c.pp_stages_per_rank) : "",
                                    c.pp_microbatch_size)
                      : "",
      c.cp_degree > 1 ? fmt::format(" cp {}", c.cp_degree) : "",
      c.dp_replicate > 1 ? fmt::format(" dp_replicate {}", c.dp_replicate) : "",
      s.families.at(static_cast<size_t>(c.family)).name, to_string(c.float8), c.async_tp, c.loss_parallel,
      to_string(c.activation_checkpointing), c.ac_layers > 0 ? fmt::format(" ac_layers={}", c.ac_layers) : "",
      c.local_batch_size, s.seq_lens.size() > 1 ? fmt::format(" seq={}", c.seq_len) : "",
      c.gradient_accumulation_steps > 1 ? fmt::format(" grad_accum={}", c.gradient_accumulation_steps) : "");
}

}  // namespace tptune
