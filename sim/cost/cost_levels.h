#pragma once
// The level each cost parameter belongs to (issue 38): a GPU preset composes one of each, and a fit moves a term at its
// level, so that what one part's runs teach about its architecture's kernels or its software stack reaches every part
// that shares them.
//   part          the part itself: its sustained tensor clock under its power limit (tensor_clock_fraction); the
//                 datasheet peaks, HBM, NVLink and NIC are the preset's figures (sim/gpu_spec.h)
//   architecture  the architecture's kernels: GEMM efficiency versus shape per dtype, attention, memory-bound kernels,
//                 NCCL (fitted to kernel-level measurements: profiles/kernels, sim/calibrate/kernel_fit.h)
//   stack         the software stack: eager PyTorch against torch.compile (traffic factors, dispatch, fusion),
//                 torchao's float8 layouts and recipes, the optimizer, FSDP's copies, the caching allocator's reserve
//                 (fitted end to end to the public record: sim/calibrate/published_fit.h); tp-run's own runtime is
//                 another stack, which its profiles are priced with (sim/cost/tp_run_stack.h)
//   host          ranks that share a machine (the cpu device: sim/shared_machine.h), not a GPU level
// Every named cost parameter (sim/cost/cost_param_list.h) has one; tests/sim/cost_levels_test.cc checks that none is
// left out.
#include <string_view>

namespace tptune {

enum class CostLevel { part, architecture, stack, host };

std::string_view to_string(CostLevel l);
// The level of the cost parameter `name`; throws tptune::Error for a name the table does not classify.
CostLevel cost_param_level(std::string_view name);

}  // namespace tptune
