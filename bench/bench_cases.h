#pragma once
// The workload the benchmarks and the callgrind gate share: Llama3-405B, seq 8192, local batch 1, on 1024 H100s
// (128 nodes x 8), sequence-parallel plan at tp 8 with loss parallel and FSDP 128.

#include "plans/language/config.h"
#include "plans/lower/lower.h"
#include "sim/cluster_spec.h"
#include "sim/gpu_spec.h"

namespace tptune::bench {

inline Program lower_llama405b(bool async_tp = false, ActivationCheckpointing ac = ActivationCheckpointing::none) {
  Model m;
  model_preset("llama3-405b", m);
  Training t;
  t.seq_len = 8192;
  t.local_batch_size = 1;
  Plan base;
  base.tp_degree = 8;
  base.dp_shard = 128;
  base.loss_parallel = true;
  base.async_tp = async_tp;
  base.activation_checkpointing = ac;
  return lower(m, t, preset_plan("sequence_parallel", base));
}

inline ClusterSpec h100_cluster_1024() { return make_cluster(gpu_preset("h100-sxm"), 128, 8); }

}  // namespace tptune::bench
