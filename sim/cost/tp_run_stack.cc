#include "sim/cost/tp_run_stack.h"

#include "sim/cost/cost_param_fields.h"

namespace tptune {

CostParams tp_run_cost_params(const GpuSpec& gpu) {
  CostParams c = device_cost_params(gpu);
  if (gpu.architecture == "cpu") return c;
  c.norm_traffic_factor = c.norm_bwd_traffic_factor = 1;
  c.rope_traffic_factor = c.rope_bwd_traffic_factor = 1;
  c.activation_traffic_factor = c.activation_bwd_traffic_factor = 1;
  c.compiled_norm_traffic_factor = c.compiled_rope_traffic_factor = c.compiled_activation_traffic_factor = 1;
  c.eager_dispatch_us = c.compiled_dispatch_us = 0;
  c.optimizer_traffic_factor = 1;
  c.fsdp_copy_traffic_factor = 0;
  return c;
}

}  // namespace tptune
