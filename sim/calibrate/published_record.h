#pragma once
// The public record: measured training runs transcribed from published benchmarks, one YAML file per source
// (profiles/published/README.md states the schema). `tp-plan accuracy --published DIR` predicts every run
// (sim/calibrate/published_accuracy.h), `tp-plan calibrate --published DIR` fits cost parameters to them
// (sim/calibrate/published_fit.h).
//
//   std::vector<PublishedSource> record = load_published_record("profiles/published");
//
// A file:
//   source: {id, citation, repository, path, commit | paper, table, hardware, software, measurement}
//   runs:   - {id, table, quote, config: {model, training, cluster}, plan: {tp, float8, async_tp [, preset,
//              ac_layers, cp, pp, pp_schedule, pp_microbatch_size, ep]}, measured: {tokens_per_second_per_gpu [,
//              peak_memory_gib, mfu]}}
//           - {id, table, quote, not_expressible: "why tptune cannot express it"}
//   ratios: - {name, numerator: RUN, denominator: RUN}
// Checks (tptune::Error, one line "<file>:<line>: <key>: ..."): every key known, the required ones present;
// source.id unique over the folder; run ids unique in a file; a run has config + plan + measured or not_expressible,
// never both; `config` read by the config reader (plans/language/config.h: every key checked as in a config file, the
// error's key prefixed "runs[3].config."); measured tokens/s per GPU > 0; a ratio's numerator and denominator name
// expressible runs of the same file. The GPU preset a config names is resolved when the run is predicted, not here.
#include <optional>
#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/pipeline_parallel.h"
#include "sim/calibrate/source_citation.h"

namespace tptune {

// How `tp-plan simulate CONFIG --preset P --tp N --float8 F [--async-tp] [--ac-layers K]` would be asked for the run.
struct PublishedPlan {
  std::string preset = "sequence_parallel";  // torchtitan's apply_tp
  int tp = 1;
  Float8Recipe float8 = Float8Recipe::none;
  bool async_tp = false;
  int64_t ac_layers = 0;  // 0: every block
  // Context parallelism (torchtitan's context_parallel_degree), with torchtitan's defaults: allgather rotation and
  // head-tail load balancing. 1: none.
  int cp = 1;
  // Pipeline parallelism (torchtitan's pipeline_parallel_degree, _schedule, _microbatch_size; the default split). 1:
  // none.
  int pp = 1;
  PipelineScheduleKind pp_schedule = PipelineScheduleKind::one_f_one_b;
  int64_t pp_microbatch_size = 1;
  // Expert parallelism of a mixture of experts (torchtitan's expert_parallel_degree; the plan's ep_degree,
  // plans/language/expert_parallel.h). 1: none.
  int ep = 1;
  std::string summary() const;  // "tp 8 float8 tensorwise async" / "tp 1 bf16" / "tp 1 float8 tensorwise cp 4"
};

struct PublishedMeasured {
  double tokens_per_second_per_gpu = 0;
  std::optional<double> peak_memory_gib;
  std::optional<double> mfu;  // fraction
};

struct PublishedRun {
  std::string id, table, quote;
  std::string at;               // "<file>:<line>" of the run, for errors raised when it is predicted
  std::string not_expressible;  // the reason, for a run tptune cannot express; empty otherwise
  // Expressible runs only:
  Config config;
  PublishedPlan plan;
  PublishedMeasured measured;
  bool expressible() const { return not_expressible.empty(); }
};

struct PublishedRatio {
  std::string name, numerator, denominator;
};

struct PublishedSource : SourceCitation {
  std::string table, hardware, software;
  std::vector<PublishedRun> runs;  // in file order
  std::vector<PublishedRatio> ratios;
  // The run called `id` (nullptr when none).
  const PublishedRun* run(const std::string& id) const;
};

// Every *.yaml of `dir`, sorted by file name. Throws tptune::Error for a folder that does not exist or holds no
// *.yaml, and for any error of a file (above).
std::vector<PublishedSource> load_published_record(const std::string& dir);
// One file's text; `name` stands in for the file in errors, `base_dir` resolves a config's model.hf_config.
PublishedSource parse_published_source(const std::string& text, const std::string& name,
                                       const std::string& base_dir = {});

}  // namespace tptune
