#pragma once
// Which attention kernel torch's scaled_dot_product_attention runs (issue 38, item 4): `training.sdpa_backend`, named
// as torch's SDPBackend names them (flash, cudnn, efficient, flex), or `auto` (the default): the kernel torch and
// torchtitan choose for the GPU's architecture and `training.torch_version` (absent: the current torch, 2.11 or later).
//
// auto, as torch's sdp_utils.cpp orders the fused backends (priority_order, check_prefer_cudnn_attention):
//   hopper     torch <= 2.4: flash (cuDNN opt-in, TORCH_CUDNN_SDPA_ENABLED; pytorch/pytorch#125343 reverted in 2.4
//              by #128539); 2.5.0: cudnn (the 2.5 release put cuDNN first on H100); 2.5.1 to 2.8: flash
//              (pytorch/pytorch#138522 made cuDNN opt-in, cherry-picked to release/2.5; #142132: "SDPA is not
//              automatically choosing CUDNN impl" on H100 with 2.6's nightly, "expected"); 2.9: cudnn
//              (pytorch/pytorch#162073, "Enable cuDNN SDPA by default for SM 9.0, SM 10.0", for 2.9); 2.10: flash
//              (the preference gated on cuDNN above 9.15.0 after pytorch/pytorch#169849, which the 2.10 wheels'
//              cuDNN is not: huggingface/transformers#48163); 2.11 and later: cudnn (its wheels' cuDNN passes the
//              gate; our H200 run with torch 2.11.0+cu130 ran cuDNN's fused kernels, profiles/h200/README.md)
//   blackwell  cudnn: torchtitan put cuDNN first on B200 (pytorch/torchtitan#1196, #1209: "B200 is much more
//              performant than FAv2"), and torch 2.9 and later prefer it on sm100 (#162073, #170800)
//   ampere     flash at every version (check_prefer_cudnn_attention is sm90/sm100 only)
//   cpu        tp-run's own attention kernel (kernels/cpu/attention.cc): no SDPA backend; an explicit value is an error
// A framework may fix the kernel before torch chooses: torchtitan 0.3's models do not call SDPA at all. Its
// model_registry functions default to attn_backend "flex" (torchtitan 0.3.0 models/llama3/__init__.py,
// models/qwen3/__init__.py: `attn_backend: str = "flex"`), and get_attention_config (models/common/config_utils.py)
// refuses "sdpa" for language models ("sdpa is no longer supported for language models; positions are always
// available so use flex, flex_flash, or varlen"): `auto` under framework torchtitan-0.3 is FlexAttention
// (Plan::attention_kernel, set by apply_framework).
// Which kernel runs decides its price: sim/cost/compute_cost.h (attention_<backend>_{fwd,bwd}_ratio).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tptune {

enum class SdpaBackend { auto_, flash, cudnn, efficient, flex };
std::string_view to_string(SdpaBackend b);
// "auto", "flash", ...; throws tptune::Error "WHERE: expected one of auto, flash, cudnn, efficient, flex, got '...'".
SdpaBackend parse_sdpa_backend(std::string_view s, const std::string& where);
// The names, for a config reader's allowed list.
const std::vector<std::string>& sdpa_backend_names();

// A torch release, MAJOR.MINOR[.PATCH] (`training.torch_version: "2.5.1"`).
struct TorchVersion {
  int major = 0, minor = 0, patch = 0;
  auto operator<=>(const TorchVersion&) const = default;
  std::string str() const;
};
// "2.11" -> {2, 11, 0}; nullopt unless the text is 1 to 3 dot-separated numbers of at most 4 digits each.
std::optional<TorchVersion> parse_torch_version(std::string_view s);

// The backend that runs, as `auto` resolves it (above) or as the config sets it; auto_ on the cpu device (tp-run's own
// kernel, no SDPA backend). `framework_kernel`: the kernel the plan's framework fixes (Plan::attention_kernel: flex
// under torchtitan 0.3), auto_ when torch chooses. `architecture` as GPU presets name it (hopper, ...; empty or
// unknown: flash, torch's first fused backend on every CUDA GPU it does not prefer cuDNN on). Throws tptune::Error
// for an explicit backend on the cpu device (`where`: the key's "<file>:<line>: training.sdpa_backend"). Allocates
// nothing (priced per attention op).
SdpaBackend resolve_sdpa_backend(SdpaBackend requested, SdpaBackend framework_kernel,
                                 const std::optional<TorchVersion>& torch, std::string_view architecture,
                                 const std::string& where = "");
// Why: "auto: hopper, torch 2.11 or later (no torch_version): cuDNN first on sm90", "auto: torchtitan 0.3's models
// run FlexAttention (attn_backend flex)", "set", "the cpu device: ...".
std::string sdpa_backend_reason(SdpaBackend requested, SdpaBackend framework_kernel,
                                const std::optional<TorchVersion>& torch, std::string_view architecture);

}  // namespace tptune
