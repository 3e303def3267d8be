#include "sim/search/space.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "plans/language/module_names.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/limits.h"

namespace tptune {

std::vector<int> default_tp_degrees(const Cluster& c) {
  std::vector<int> out;
  const int world = c.world_size(), cap = 2 * c.gpus_per_node;
  for (int d = 1; d <= world && d <= cap; ++d)
    if (world % d == 0) out.push_back(d);
  if (out.empty()) out.push_back(1);
  return out;
}

std::vector<int> default_ep_degrees(const Model& m, int world_size) {
  if (m.moe.experts <= 0) return {1};
  std::vector<int> out;
  for (int d = 1; d <= world_size && d <= m.moe.experts; ++d)
    if (world_size % d == 0 && m.moe.experts % d == 0) out.push_back(d);
  return out;
}

namespace {
void check_space_size(const std::string& path, const ResolvedSpace& r);

// search.ep_degrees: the model's default (default_ep_degrees()) when the list is empty, or is the config's default
// {1} without the key stated (SearchSpace::stated_at: in the file, or by --ep); a dense model's degrees other than 1
// refused in one line (its key's file:line, or the option that set it).
void resolve_ep_degrees(const Config& cfg, ResolvedSpace& r) {
  const bool stated = r.stated_at.count("ep_degrees") > 0;
  if (r.ep_degrees.empty() || (!stated && r.ep_degrees == std::vector<int>{1}))
    r.ep_degrees = default_ep_degrees(cfg.model, r.world_size);
  if (cfg.model.moe.experts > 0) return;
  if (std::any_of(r.ep_degrees.begin(), r.ep_degrees.end(), [](int ep) { return ep != 1; })) {
    const auto at = r.stated_at.find("ep_degrees");
    throw Error(fmt::format("{}: search.ep_degrees [{}]: the model has no routed experts (model.moe); expected [1]",
                            at != r.stated_at.end() ? at->second : cfg.path, fmt::join(r.ep_degrees, ", ")));
  }
}
}  // namespace

ResolvedSpace resolve_space(const Config& cfg) {
  const SearchSpace& s = cfg.search;
  ResolvedSpace r;
  static_cast<SearchSpace&>(r) = s;
  r.world_size = cfg.cluster.world_size();
  if (r.tp_degrees.empty()) r.tp_degrees = default_tp_degrees(cfg.cluster);
  if (r.dp_replicate.empty()) r.dp_replicate = {1};
  if (r.cp_degrees.empty()) r.cp_degrees = {1};
  if (r.pp_degrees.empty()) r.pp_degrees = {1};
  resolve_ep_degrees(cfg, r);
  if (r.pp_schedules.empty()) r.pp_schedules = {PipelineScheduleKind::one_f_one_b};
  if (r.pp_microbatch_sizes.empty()) r.pp_microbatch_sizes = {1};
  if (r.pp_stages_per_rank.empty()) r.pp_stages_per_rank = {0};
  // The pipeline candidates are evaluated one by one (sim/pipeline/step.h): none of the pp 1 space's shortcuts.
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
  check_space_size(cfg.path, r);
  return r;
}

namespace {

// The loss-parallel values searched for a family: the space's for presets, the file's own for plan files.
size_t n_loss_parallel(const ResolvedSpace& s, const PlanFamily& f) { return f.preset ? s.loss_parallel.size() : 1; }
bool loss_parallel_value(const ResolvedSpace& s, const PlanFamily& f, size_t k) {
  return f.preset ? s.loss_parallel[k] : f.file_plan.loss_parallel;
}

// The pp degrees above 1 (the pipeline candidates'), in the list's order.
size_t n_pipeline_degrees(const ResolvedSpace& s) {
  return static_cast<size_t>(std::count_if(s.pp_degrees.begin(), s.pp_degrees.end(), [](int pp) { return pp > 1; }));
}

// a x b and a + b for counts (>= 0), saturating at INT64_MAX: the space's size is compared with a limit, never used
// past it.
constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();
int64_t saturating_mul(int64_t a, int64_t b) { return a != 0 && b > kSaturated / a ? kSaturated : a * b; }
int64_t saturating_add(int64_t a, int64_t b) { return b > kSaturated - a ? kSaturated : a + b; }

// One list of the space: its key in the search section, how the refusal names it, and its length.
struct SpaceList {
  std::string key, label;
  int64_t n = 0;
};

int64_t product(const std::vector<SpaceList>& lists) {
  int64_t p = 1;
  for (const SpaceList& l : lists) p = saturating_mul(p, l.n);
  return p;
}

std::string count_text(int64_t n) { return n == kSaturated ? fmt::format("at least {}", n) : std::to_string(n); }

// "tp_degrees 32 x cp_degrees 32 x local_batch_sizes 16": the lists of more than one value.
std::string factors_text(const std::vector<SpaceList>& lists) {
  std::vector<std::string> parts;
  for (const SpaceList& l : lists)
    if (l.n > 1) parts.push_back(fmt::format("{} {}", l.label, l.n));
  return parts.empty() ? std::string("1") : fmt::format("{}", fmt::join(parts, " x "));
}

// The refusal of a space over `limit` candidates: "<file>:<line>: <what>: N candidates (<how>); expected at most M:
// shorten search.a (line 5), search.b (line 7), ..." naming the three longest lists (with their line where the section
// states them); the location first is the longest stated list's, else the file's.
[[noreturn]] void refuse_space(const std::string& path, const ResolvedSpace& r, const std::string& what, int64_t total,
                               const std::string& how, int64_t limit, std::vector<SpaceList> lists) {
  std::stable_sort(lists.begin(), lists.end(), [](const SpaceList& a, const SpaceList& b) { return a.n > b.n; });
  std::string where = path;
  std::vector<std::string> longest;
  for (const SpaceList& l : lists) {
    if (l.n <= 1 || longest.size() == 3) break;
    auto it = r.stated_at.find(l.key);
    if (it != r.stated_at.end() && where == path) where = it->second;
    // "file:line": its line alone (the file is the config's)
    longest.push_back(it != r.stated_at.end()
                          ? fmt::format("search.{} (line {})", l.key, it->second.substr(it->second.rfind(':') + 1))
                          : fmt::format("search.{}", l.key));
  }
  throw Error(fmt::format("{}: {}: {} candidates ({}); expected at most {}: shorten {}", where, what, count_text(total),
                          how, limit, fmt::join(longest, ", ")));
}

// The cap on the space's size (resolve_space()).
void check_space_size(const std::string& path, const ResolvedSpace& r) {
  int64_t per_family = 0;
  for (const PlanFamily& f : r.families) per_family += static_cast<int64_t>(n_loss_parallel(r, f));
  auto n = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  const std::vector<SpaceList> base_lists = {
      {"seq_lens", "seq_lens", n(r.seq_lens)},
      {"tp_degrees", "tp_degrees", n(r.tp_degrees)},
      {"dp_replicate", "dp_replicate", n(r.dp_replicate)},
      {"cp_degrees", "cp_degrees", n(r.cp_degrees)},
      {"ep_degrees", "ep_degrees", n(r.ep_degrees)},
      {"presets", "presets and plans x loss_parallel", per_family},
      {"float8", "float8", n(r.float8)},
      {"async_tp", "async_tp", n(r.async_tp)},
      {"activation_checkpointing", "activation_checkpointing", n(r.activation_checkpointing)},
      {"local_batch_sizes", "local_batch_sizes", n(r.local_batch_sizes)}};
  const std::vector<SpaceList> pipeline_lists = {
      {"pp_degrees", "pp_degrees (above 1)", static_cast<int64_t>(n_pipeline_degrees(r))},
      {"pp_schedules", "pp_schedules", n(r.pp_schedules)},
      {"pp_stages_per_rank", "pp_stages_per_rank", n(r.pp_stages_per_rank)},
      {"pp_microbatch_sizes", "pp_microbatch_sizes", n(r.pp_microbatch_sizes)}};
  const int64_t base = product(base_lists);
  const int64_t pipeline = r.searches_pp() ? saturating_mul(base, product(pipeline_lists)) : 0;
  const bool plain = std::find(r.pp_degrees.begin(), r.pp_degrees.end(), 1) != r.pp_degrees.end();
  const int64_t total = saturating_add(plain ? base : 0, pipeline);
  std::vector<SpaceList> all = base_lists;
  if (r.searches_pp()) all.insert(all.end(), pipeline_lists.begin(), pipeline_lists.end());
  if (total > limits::max_search_candidates) {
    // "A x B = n at pp 1, and n x C = m with a pipeline"; without pp 1, "A x B x C = m with a pipeline".
    std::string how;
    if (!r.searches_pp())
      how = fmt::format("{} = {}", factors_text(base_lists), count_text(base));
    else if (plain)
      how = fmt::format("{} = {} at pp 1, and {} x {} = {} with a pipeline", factors_text(base_lists), count_text(base),
                        count_text(base), factors_text(pipeline_lists), count_text(pipeline));
    else
      how = fmt::format("{} = {} with a pipeline", factors_text(all), count_text(pipeline));
    refuse_space(path, r, "search space size (the product of the search lists' lengths)", total, how,
                 limits::max_search_candidates, all);
  }
  if (r.ac_layers.empty()) return;
  // search.ac_layers: each enumerated candidate with a policy other than none stands for one candidate per k too.
  const int64_t policies = std::count_if(r.activation_checkpointing.begin(), r.activation_checkpointing.end(),
                                         [](ActivationCheckpointing a) { return a != ActivationCheckpointing::none; });
  const int64_t per_policy = base / std::max<int64_t>(n(r.activation_checkpointing), 1);
  const int64_t swept = saturating_mul(saturating_mul(per_policy, policies), n(r.ac_layers));
  const int64_t with_sweep = saturating_add(base, swept);
  if (with_sweep > limits::max_swept_candidates) {
    all.push_back({"ac_layers", "ac_layers", n(r.ac_layers)});
    refuse_space(path, r, "search space size with search.ac_layers", with_sweep,
                 fmt::format("{} enumerated and {} swept: {} policies other than none x ac_layers {}", count_text(base),
                             count_text(swept), policies, n(r.ac_layers)),
                 limits::max_swept_candidates, all);
  }
}

// `c`'s activation checkpointing and local batch size (the innermost lists), and the gradient accumulation that
// follows from its batch.
void set_policy_and_batch(const ResolvedSpace& s, Candidate& c, ActivationCheckpointing ac, int64_t lbs) {
  c.activation_checkpointing = ac;
  c.local_batch_size = lbs;
  c.gradient_accumulation_steps = 1;
  // lbs <= 2^16, dp x rep <= world <= 2^20: no overflow.
  if (s.gradient_accumulation && s.global_batch_size > 0 && c.dp_shard > 0) {
    const int64_t per_microbatch = lbs * c.dp_shard * c.dp_replicate;
    if (s.global_batch_size % per_microbatch == 0) c.gradient_accumulation_steps = s.global_batch_size / per_microbatch;
  }
}

// The candidate of the pp 1 space at `index` with these values (the body of enumerate_candidates()' loops).
Candidate make_candidate(const ResolvedSpace& s, size_t index, int64_t seq, int tp, int rep, int cp, int ep, size_t fam,
                         Float8Recipe f8, bool async, bool lp, ActivationCheckpointing ac, int64_t lbs) {
  Candidate c;
  c.index = static_cast<int>(index);  // at most limits::max_search_candidates (resolve_space())
  c.tp_degree = tp;
  // 0: tp x cp x dp_replicate does not divide the world (each at most 2^20: no overflow)
  const int64_t per_shard = static_cast<int64_t>(tp) * rep * cp;
  c.dp_shard = per_shard > 0 && s.world_size % per_shard == 0 ? static_cast<int>(s.world_size / per_shard) : 0;
  c.dp_replicate = rep;
  c.cp_degree = cp;
  c.ep_degree = ep;
  c.family = static_cast<int>(fam);
  c.float8 = f8;
  c.async_tp = async;
  c.loss_parallel = lp;
  c.seq_len = seq;
  set_policy_and_batch(s, c, ac, lbs);
  return c;
}

// Base candidate `b` with a pipeline (the body of pipeline_candidates()' loops).
Candidate make_pipeline_candidate(const ResolvedSpace& s, const Candidate& b, int index, int pp,
                                  PipelineScheduleKind kind, int spr, int64_t mbs) {
  Candidate c = b;
  c.index = index;
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
    if (s.global_batch_size % per_microbatch == 0) c.gradient_accumulation_steps = s.global_batch_size / per_microbatch;
  }
  return c;
}

}  // namespace

size_t ResolvedSpace::size() const {
  int64_t per_family = 0;
  for (const PlanFamily& f : families) per_family += static_cast<int64_t>(n_loss_parallel(*this, f));
  auto n = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  // At most limits::max_search_candidates for a resolved space (resolve_space()); checked for any other.
  return static_cast<size_t>(
      checked_mul({n(seq_lens), n(tp_degrees), n(dp_replicate), n(cp_degrees), n(ep_degrees), per_family, n(float8),
                   n(async_tp), n(activation_checkpointing), n(local_batch_sizes)},
                  "search space size (the product of the search lists' lengths)"));
}

size_t ResolvedSpace::pipeline_size() const {
  auto n = [](const auto& v) { return static_cast<int64_t>(v.size()); };
  return static_cast<size_t>(checked_mul({static_cast<int64_t>(size()), static_cast<int64_t>(n_pipeline_degrees(*this)),
                                          n(pp_schedules), n(pp_stages_per_rank), n(pp_microbatch_sizes)},
                                         "search space size (the product of the search lists' lengths)"));
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
  return checked_add(base, swept, "search space size with search.ac_layers");
}

Candidate ResolvedSpace::candidate_at(size_t index) const {
  // Mixed radix, innermost first: local batch, AC, loss parallel, async, float8 within a family's block (whose
  // loss-parallel values are the family's), the families one after the other, then ep, cp, dp_replicate, tp, seq_len.
  const size_t per_lp = float8.size() * async_tp.size() * activation_checkpointing.size() * local_batch_sizes.size();
  size_t lp_values = 0;
  for (const PlanFamily& f : families) lp_values += n_loss_parallel(*this, f);
  size_t outer = index / (per_lp * lp_values), i = index % (per_lp * lp_values), fam = 0;
  for (size_t block; i >= (block = per_lp * n_loss_parallel(*this, families[fam])); ++fam) i -= block;
  const size_t lbs = i % local_batch_sizes.size();
  i /= local_batch_sizes.size();
  const size_t ac = i % activation_checkpointing.size();
  i /= activation_checkpointing.size();
  const size_t nlp = n_loss_parallel(*this, families[fam]), lp = i % nlp;
  i /= nlp;
  const size_t async = i % async_tp.size(), f8 = i / async_tp.size();
  const size_t ep = outer % ep_degrees.size();
  outer /= ep_degrees.size();
  const size_t cp = outer % cp_degrees.size();
  outer /= cp_degrees.size();
  const size_t rep = outer % dp_replicate.size();
  outer /= dp_replicate.size();
  const size_t tp = outer % tp_degrees.size(), seq = outer / tp_degrees.size();
  return make_candidate(*this, index, seq_lens.at(seq), tp_degrees[tp], dp_replicate[rep], cp_degrees[cp],
                        ep_degrees[ep], fam, float8[f8], async_tp[async], loss_parallel_value(*this, families[fam], lp),
                        activation_checkpointing[ac], local_batch_sizes[lbs]);
}

Candidate ResolvedSpace::candidate_at(size_t index, const Candidate& same_structure) const {
  Candidate c = same_structure;
  c.index = static_cast<int>(index);
  const size_t nb = local_batch_sizes.size();
  set_policy_and_batch(*this, c, activation_checkpointing[index / nb % activation_checkpointing.size()],
                       local_batch_sizes[index % nb]);
  return c;
}

Candidate ResolvedSpace::pipeline_candidate_at(size_t k, int first_index) const {
  const size_t nm = pp_microbatch_sizes.size(), ns = pp_stages_per_rank.size(), nk = pp_schedules.size();
  const size_t per_base = n_pipeline_degrees(*this) * nk * ns * nm;
  const size_t b = k / per_base, r = k % per_base;
  const size_t mbs = r % nm, spr = r / nm % ns, kind = r / (nm * ns) % nk, nth_pp = r / (nm * ns * nk);
  int pp = 0;
  for (size_t seen = 0; int d : pp_degrees)
    if (d > 1 && seen++ == nth_pp) pp = d;
  return make_pipeline_candidate(*this, candidate_at(b), first_index + static_cast<int>(k), pp, pp_schedules[kind],
                                 pp_stages_per_rank[spr], pp_microbatch_sizes[mbs]);
}

std::vector<Candidate> enumerate_candidates(const ResolvedSpace& s) {
  std::vector<Candidate> out;
  out.reserve(s.size());
  for (int64_t seq : s.seq_lens)
    for (int tp : s.tp_degrees)
      for (int rep : s.dp_replicate)
        for (int cp : s.cp_degrees)
          for (int ep : s.ep_degrees)
            for (size_t fam = 0; fam < s.families.size(); ++fam)
              for (Float8Recipe f8 : s.float8)
                for (bool async : s.async_tp)
                  for (size_t lp = 0; lp < n_loss_parallel(s, s.families[fam]); ++lp)
                    for (ActivationCheckpointing ac : s.activation_checkpointing)
                      for (int64_t lbs : s.local_batch_sizes)
                        out.push_back(make_candidate(s, out.size(), seq, tp, rep, cp, ep, fam, f8, async,
                                                     loss_parallel_value(s, s.families[fam], lp), ac, lbs));
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
          for (int64_t mbs : s.pp_microbatch_sizes)
            out.push_back(make_pipeline_candidate(s, b, index++, pp, kind, spr, mbs));
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
      (c.dp_replicate > 1 ? fmt::format(" dp_replicate {}", c.dp_replicate) : std::string()) +
          (c.ep_degree > 1 ? fmt::format(" ep {}", c.ep_degree) : std::string()),
      s.families.at(static_cast<size_t>(c.family)).name, to_string(c.float8), c.async_tp, c.loss_parallel,
      to_string(c.activation_checkpointing), c.ac_layers > 0 ? fmt::format(" ac_layers={}", c.ac_layers) : "",
      c.local_batch_size, s.seq_lens.size() > 1 ? fmt::format(" seq={}", c.seq_len) : "",
      c.gradient_accumulation_steps > 1 ? fmt::format(" grad_accum={}", c.gradient_accumulation_steps) : "");
}

}  // namespace tptune
