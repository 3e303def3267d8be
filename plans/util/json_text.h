#pragma once
// JSON files a user hands us (transformers config.json, tp-run profiles and bench files, check baselines): parsing
// with nlohmann-json, and typed reading of their members, every error one line that names the file.
//
// Parsing (parse_json_text) refuses, as `FILE:LINE: invalid JSON: WHAT`:
//   - syntax errors, and strings that are not UTF-8 (nlohmann's lexer checks both; it reports byte offsets, turned
//     into lines here);
//   - nesting deeper than kMaxJsonDepth: refused while parsing, before the value exists, because copying, comparing
//     and dumping a nlohmann value recurse once per level (100k levels overflow the stack);
//   - numbers past the double range (1e400), which nlohmann reports as out_of_range, not as a parse error;
//   - a key stated twice in one object (`"hidden_size": 4096, ... "hidden_size": 8192`), which nlohmann would read as
//     its last value silently: "NAME:LINE: invalid JSON: duplicate key "hidden_size" (first on line L): ...", LINE
//     the second statement's (the YAML readers refuse duplicate keys too).
//
// Reading (JsonDoc) checks each member's type and range where it is read:
//   prof.json: format: expected a string, got 3
//   prof.json: environment.ranks: expected an integer in 1..1048576, got 4294967297
// so that a wrong type is this error and not nlohmann's type_error (which the tools report as an internal error),
// and an integer is never narrowed before it is checked (2^32 + 1 read as an int is 1).
//
// Writing: json_dump() is dump() that never throws on a string which is not UTF-8 (a model name from a YAML file, a
// path from the command line); such bytes become U+FFFD.

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "plans/util/limits.h"

namespace tptune {

// The deepest nesting parse_json_text accepts. Real files nest a few levels (a profile: 4, a config.json: 3).
inline constexpr int kMaxJsonDepth = 64;

// 1-based line of byte offset `byte` of `text` (nlohmann's parse_error::byte counts from 1; clamped into the text).
int line_of_byte(const std::string& text, size_t byte);

// Parses `text`; on an error above throws tptune::Error "NAME:LINE: invalid JSON: WHAT", or with `expected`
// "NAME:LINE: invalid JSON (expected EXPECTED): WHAT".
nlohmann::json parse_json_text(const std::string& text, const std::string& name, std::string_view expected = {});

// `j` as JSON text (indent < 0: one line), invalid UTF-8 replaced rather than thrown on.
std::string json_dump(const nlohmann::json& j, int indent = -1);

// How a JSON value reads in an error's "got ..." part: its JSON text, cut to `max` characters with "...".
std::string describe_json(const nlohmann::json& v, size_t max = 40);

// Typed, checked access to the members of a parsed JSON document. `path` is the dotted path of the object that holds
// `key` ("" at the top level, "environment", "ops[3]"); errors name "PATH.KEY".
class JsonDoc {
 public:
  explicit JsonDoc(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // Throws "FILE: KEY: MESSAGE".
  [[noreturn]] void fail(std::string_view key, std::string_view message) const;
  // Throws "FILE: KEY: expected EXPECTED, got DESCRIBE(V)".
  [[noreturn]] void fail(std::string_view key, std::string_view expected, const nlohmann::json& v) const;

  // obj[key]: `obj` must be an object ("PATH: expected an object, got ...") and hold the key ("PATH.KEY: missing").
  const nlohmann::json& member(const nlohmann::json& obj, std::string_view path, std::string_view key) const;
  // obj[key], or nullptr when the key is absent or null (obj must still be an object).
  const nlohmann::json* find(const nlohmann::json& obj, std::string_view path, std::string_view key) const;

  std::string string(const nlohmann::json& obj, std::string_view path, std::string_view key) const;
  bool boolean(const nlohmann::json& obj, std::string_view path, std::string_view key) const;
  // An integer (no fraction, no exponent) within `r`, checked before it is narrowed ("expected an integer in 1..8";
  // with r.hi INT64_MAX: "expected a non-negative integer", "expected an integer of at least 1", and the range
  // "0..9223372036854775807" for a value past it).
  int64_t integer(const nlohmann::json& obj, std::string_view path, std::string_view key, limits::IntRange r) const;
  // A finite number within `r`.
  double number(const nlohmann::json& obj, std::string_view path, std::string_view key, limits::RealRange r) const;
  const nlohmann::json& object(const nlohmann::json& obj, std::string_view path, std::string_view key) const;
  const nlohmann::json& array(const nlohmann::json& obj, std::string_view path, std::string_view key) const;

  // The same checks on a value already in hand (an array element); `key` is its full path ("ops[3]").
  std::string string_value(const nlohmann::json& v, std::string_view key) const;
  int64_t integer_value(const nlohmann::json& v, std::string_view key, limits::IntRange r) const;
  double number_value(const nlohmann::json& v, std::string_view key, limits::RealRange r) const;

 private:
  std::string file_;
};

// "environment" + "ranks" -> "environment.ranks"; "" + "format" -> "format".
std::string json_key(std::string_view path, std::string_view key);

}  // namespace tptune
