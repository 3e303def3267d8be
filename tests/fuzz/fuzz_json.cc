// libFuzzer target: the JSON files a user hands tp-plan (plans/util/json_text.h: parse_json_text, strict JSON with
// file:line errors), read as a tp-run profile (plans/program/profile_format.h: parse_profile) and as a transformers
// config.json (plans/model/hf_config.h: parse_hf_config).
//
// Property: each reader returns its object or throws a one-line tptune::Error (fuzz_check.h). A Profile round-trips:
// profile_json() of it read back gives the same JSON (what the reader keeps is what the writer writes).
// Seed corpus: corpus/json/ (a pipeline profile as tp-run writes it, trimmed; a single-process profile; Hugging Face
// config.json files).

#include <cstddef>
#include <cstdint>
#include <string>

#include "plans/model/hf_config.h"
#include "plans/program/profile_format.h"
#include "plans/util/json_text.h"
#include "tests/fuzz/fuzz_check.h"

namespace tptune::fuzz {
namespace {

void profile_round_trip(const std::string& text) {
  const nlohmann::json once = profile_json(parse_profile_text(text, "p.json"));
  const nlohmann::json twice = profile_json(parse_profile(once, "p.json"));
  if (once != twice) defect("profile round trip", json_dump(once).substr(0, 1000));
}

}  // namespace
}  // namespace tptune::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tptune::fuzz::expect_clean([&] { tptune::fuzz::profile_round_trip(text); });
  tptune::fuzz::expect_clean([&] { tptune::parse_hf_config(text, "config.json"); });
  return 0;
}
