#pragma once
// JSON files a user hands us (transformers config.json, tp-run profiles), parsed with nlohmann-json, with its
// syntax errors turned into the project's one-line `FILE:LINE: invalid JSON: what` (nlohmann reports byte offsets).

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace tptune {

// 1-based line of byte offset `byte` of `text` (nlohmann's parse_error::byte counts from 1; clamped into the text).
int line_of_byte(const std::string& text, size_t byte);

// Parses `text`; on a syntax error throws tptune::Error "NAME:LINE: invalid JSON: WHAT", or with `expected`
// "NAME:LINE: invalid JSON (expected EXPECTED): WHAT".
nlohmann::json parse_json_text(const std::string& text, const std::string& name, std::string_view expected = {});

}  // namespace tptune
