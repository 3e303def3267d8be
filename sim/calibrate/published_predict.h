#pragma once
// Predicting the runs of the public record (sim/calibrate/published_record.h) with the simulator.
//
//   PreparedRecord rec = prepare_published(load_published_record(dir));   // resolved and lowered once
//   PublishedPrediction p = predict_run(rec.runs[0], device_cost_params(rec.runs[0].cluster.gpu));
//
// A run's plan is what `tp-plan simulate CONFIG --preset P --tp N --float8 F [--async-tp] [--ac-layers K]` resolves
// (tools/plan_options.cc, the preset path): the preset on the config's cluster (tp defaulting to gpus_per_node, loss
// parallel on for sequence_parallel), the config's activation checkpointing and local batch, then tp, float8,
// ac_layers and async TP from the run's plan, dp_shard = world / tp, gradient accumulation from the config's
// training.global_batch_size, compile from the config, and the preset re-derived with the final toggles. The Program
// does not depend on the cost parameters: it is lowered once, and a fit re-simulates it only.
// Predicted: tokens/s per GPU, peak memory GiB and MFU, the StepReport's (sim/simulate.h: torchtitan's formulas).
#include <string>
#include <vector>

#include "plans/language/plan.h"
#include "plans/program/program.h"
#include "sim/calibrate/published_record.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"

namespace tptune {

// The run's plan as tp-plan simulate resolves it (above). Throws tptune::Error "<run's file:line>: runs ...: ..."
// when tp does not divide the world.
Plan published_run_plan(const PublishedRun& run);

struct PreparedRun {
  std::string source;                 // the source's id
  const PublishedRun* run = nullptr;  // into the sources prepare_published() was given (they must outlive this)
  ClusterSpec cluster;
  Program prog;
  Plan plan;  // the plan prog was lowered from (a pipeline's is simulated per stage from it: sim/pipeline/step.h)
};

// A run that cannot be predicted (its GPU preset unknown, a plan tptune refuses), with the error.
struct NotPredicted {
  std::string source, id, error;
};

struct PreparedRecord {
  std::vector<PreparedRun> runs;  // the expressible runs that could be lowered, in folder and file order
  std::vector<NotPredicted> not_predicted;
};

PreparedRecord prepare_published(const std::vector<PublishedSource>& sources);

struct PublishedPrediction {
  double tokens_per_second_per_gpu = 0;
  // What the caching allocator reserves at the step's peak (MemoryReport::allocator_reserved): the figure torchtitan
  // logs as its memory (torch.cuda memory_stats' reserved_bytes.all.peak, torchtitan/components/metrics.py), which
  // leaves out the CUDA context and NCCL's own buffers that MemoryReport::peak adds.
  double peak_memory_gib = 0;
  double mfu = 0;  // fraction
};

PublishedPrediction predict_run(const PreparedRun& run, const CostParams& c);

}  // namespace tptune
