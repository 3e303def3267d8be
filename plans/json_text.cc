#include "plans/json_text.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/error.h"

namespace tptune {

int line_of_byte(const std::string& text, size_t byte) {
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  int line = 1;
  for (size_t i = 0; i < end; ++i)
    if (text[i] == '\n') ++line;
  return line;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& name, std::string_view expected) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: <what>"; keep <what>.
    std::string what = e.what();
    const size_t colon = what.find(": ", what.find("parse error"));
    if (colon != std::string::npos) what = what.substr(colon + 2);
    const std::string exp = expected.empty() ? "" : fmt::format(" (expected {})", expected);
    throw Error(fmt::format("{}:{}: invalid JSON{}: {}", name, line_of_byte(text, e.byte), exp, what));
  }
}

}  // namespace tptune
