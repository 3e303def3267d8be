#include "plans/language/backends/sdpa_backend.h"

#include <fmt/format.h>

#include "plans/util/enum_names.h"
#include "plans/util/error.h"

namespace tptune {

// SdpaBackend's enumerators, in declaration order.
constexpr std::string_view kSdpaBackendNames[] = {"auto", "flash", "cudnn", "efficient", "flex"};
static_assert(std::size(kSdpaBackendNames) == enum_count(SdpaBackend::flex));

std::string_view to_string(SdpaBackend b) { return name_of(kSdpaBackendNames, b); }

SdpaBackend parse_sdpa_backend(std::string_view s, const std::string& where) {
  return parse_name<SdpaBackend>(kSdpaBackendNames, s, where);
}

const std::vector<std::string>& sdpa_backend_names() {
  static const std::vector<std::string> names(std::begin(kSdpaBackendNames), std::end(kSdpaBackendNames));
  return names;
}

std::string TorchVersion::str() const {
  return patch ? fmt::format("{}.{}.{}", major, minor, patch) : fmt::format("{}.{}", major, minor);
}

std::optional<TorchVersion> parse_torch_version(std::string_view s) {
  int parts[3] = {0, 0, 0};
  int n = 0;
  size_t i = 0;
  while (true) {
    if (n == 3) return std::nullopt;
    size_t digits = 0;
    int v = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      if (++digits > 4) return std::nullopt;
      v = v * 10 + (s[i] - '0');
      ++i;
    }
    if (digits == 0) return std::nullopt;
    parts[n++] = v;
    if (i == s.size()) break;
    if (s[i] != '.') return std::nullopt;
    ++i;
  }
  return TorchVersion{parts[0], parts[1], parts[2]};
}

namespace {

// torch's default order on Hopper (sm90) by release: whether cuDNN comes first (sdpa_backend.h has the sources).
bool torch_prefers_cudnn_on_hopper(const TorchVersion& v) {
  if (v < TorchVersion{2, 5, 0}) return false;   // cuDNN opt-in (TORCH_CUDNN_SDPA_ENABLED)
  if (v < TorchVersion{2, 5, 1}) return true;    // 2.5.0: cuDNN first on H100
  if (v < TorchVersion{2, 9, 0}) return false;   // pytorch/pytorch#138522: opt-in again
  if (v < TorchVersion{2, 10, 0}) return true;   // pytorch/pytorch#162073
  if (v < TorchVersion{2, 11, 0}) return false;  // gated on cuDNN > 9.15.0, above the 2.10 wheels' cuDNN
  return true;                                   // 2.11 and later
}

}  // namespace

SdpaBackend resolve_sdpa_backend(SdpaBackend requested, SdpaBackend framework_kernel,
                                 const std::optional<TorchVersion>& torch, std::string_view architecture,
                                 const std::string& where) {
  if (architecture == "cpu") {
    if (requested != SdpaBackend::auto_)
      throw Error(
          fmt::format("{}: {} names a torch SDPA kernel, but the cpu device runs tp-run's own attention "
                      "kernel; remove the key or set auto",
                      where.empty() ? std::string("training.sdpa_backend") : where, to_string(requested)));
    return SdpaBackend::auto_;
  }
  if (requested != SdpaBackend::auto_) return requested;
  if (framework_kernel != SdpaBackend::auto_) return framework_kernel;
  if (architecture == "hopper")
    return !torch || torch_prefers_cudnn_on_hopper(*torch) ? SdpaBackend::cudnn : SdpaBackend::flash;
  if (architecture == "blackwell") return SdpaBackend::cudnn;
  return SdpaBackend::flash;
}

std::string sdpa_backend_reason(SdpaBackend requested, SdpaBackend framework_kernel,
                                const std::optional<TorchVersion>& torch, std::string_view architecture) {
  if (architecture == "cpu") return "the cpu device: tp-run's attention kernel";
  if (requested != SdpaBackend::auto_) return "set";
  if (framework_kernel == SdpaBackend::flex)  // the one framework that fixes a kernel (sdpa_backend.h)
    return "auto: torchtitan 0.3's models run FlexAttention (model_registry's attn_backend \"flex\")";
  if (framework_kernel != SdpaBackend::auto_)
    return fmt::format("auto: the framework's kernel, {}", to_string(framework_kernel));
  const std::string version = torch ? "torch " + torch->str() : std::string("torch 2.11 or later (no torch_version)");
  const std::string arch = architecture.empty() ? std::string("no architecture") : std::string(architecture);
  const SdpaBackend b = resolve_sdpa_backend(requested, SdpaBackend::auto_, torch, architecture);
  if (architecture == "blackwell") return fmt::format("auto: {}, {}: cuDNN first on sm100", arch, version);
  return fmt::format("auto: {}, {}: {} first", arch, version, b == SdpaBackend::cudnn ? "cuDNN" : "flash");
}

}  // namespace tptune
