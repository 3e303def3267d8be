#pragma once
// Strict, typed reading of YAML documents (configs, plans, GPU specs) with errors that point at the source line.
//
// Every reading function takes the node, the dotted key path the user sees ("model.n_layers") and a YamlDoc that
// knows the file name. A value of the wrong type or out of range throws tptune::Error in one line:
//
//   config.yaml:5: model.n_layers: expected a positive integer, got 'abc'
//
// Lines are 1-based (yaml-cpp's Mark().line + 1). A node that came from no text (a missing key) has no mark; the
// error then names the nearest node that has one (the parent map), which is where the key should have been.
// Scalars are parsed here rather than with yaml-cpp's as<T>() so that "12abc" or "1.5" is an error for an integer
// and the message can echo the text.

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "plans/util/limits.h"

namespace tptune::yaml {

// True for a defined scalar (yaml-cpp throws when asked the type of a missing key's node).
bool is_scalar(const YAML::Node& n);

// Parses YAML text; a syntax error (yaml-cpp's ParserException) becomes tptune::Error "<name>:<line>: invalid YAML:
// <what yaml-cpp says>".
YAML::Node parse(const std::string& text, const std::string& name);
// Reads a whole YAML file through read_input_file (plans/util/input_file.h: bounded, regular files only, UTF-8); throws
// tptune::Error "<path>: no such file (expected a <what> YAML file)", "<path>: is a directory ...", "<path>: empty
// file ...", ... when it cannot be read.
std::string read_file(const std::string& path, const std::string& what);

// The file a document came from, used to prefix every error with "<file>:<line>: ".
class YamlDoc {
 public:
  explicit YamlDoc(std::string file) : file_(std::move(file)) {}
  const std::string& file() const { return file_; }

  // "<file>:<line>" of `node` (or of `fallback` when `node` has no mark; just "<file>" when neither has one).
  std::string at(const YAML::Node& node, const YAML::Node& fallback = YAML::Node()) const;
  // "<file>:<line>: <key>", the `where` argument that parse_* helpers of other headers take.
  std::string where(const YAML::Node& node, std::string_view key) const { return at(node) + ": " + std::string(key); }

  // Throws "<file>:<line>: <key>: expected <expected>, got '<text of node>'".
  [[noreturn]] void fail(const YAML::Node& node, std::string_view key, std::string_view expected) const;
  // Throws "<file>:<line>: <key>: <message>".
  [[noreturn]] void fail_msg(const YAML::Node& node, std::string_view key, std::string_view message) const;

  // Typed scalars. Integers are decimal with an optional sign; reals accept any strtod-style number.
  int64_t integer(const YAML::Node& node, std::string_view key) const;
  int64_t positive_integer(const YAML::Node& node, std::string_view key) const;  // >= 1
  double real(const YAML::Node& node, std::string_view key) const;
  double positive_real(const YAML::Node& node, std::string_view key) const;     // > 0
  double nonnegative_real(const YAML::Node& node, std::string_view key) const;  // >= 0
  // An integer / a finite number within `r` (plans/util/limits.h); the error states the range:
  //   config.yaml:3: model.n_layers: expected an integer in 1..10000, got '2147483648'
  int64_t integer_in(const YAML::Node& node, std::string_view key, limits::IntRange r) const;
  double real_in(const YAML::Node& node, std::string_view key, limits::RealRange r) const;
  bool boolean(const YAML::Node& node, std::string_view key) const;        // true/false (yes/no, on/off)
  std::string string(const YAML::Node& node, std::string_view key) const;  // any non-empty scalar
  // A scalar that must be one of `allowed`; the error lists them.
  std::string choice(const YAML::Node& node, std::string_view key, const std::vector<std::string>& allowed) const;

  // A list of values: a YAML sequence, or a single scalar standing for a one-element list. Empty lists are errors.
  // `item(node, key)` reads one element; element keys are "<key>[i]".
  template <class F>
  auto list(const YAML::Node& node, std::string_view key, F item) const {
    using T = decltype(item(node, std::string(key)));
    std::vector<T> out;
    if (is_scalar(node)) {
      out.push_back(item(node, std::string(key)));
      return out;
    }
    if (!node.IsDefined() || !node.IsSequence() || node.size() == 0) fail(node, key, "a non-empty list");
    for (size_t i = 0; i < node.size(); ++i)
      out.push_back(item(node[i], std::string(key) + "[" + std::to_string(i) + "]"));
    return out;
  }

  // `node` must be a map whose keys are all in `allowed` (and appear once); the error names the key's line and
  // lists the allowed keys. `prefix` is the dotted path of the map ("" at the top level).
  void check_map(const YAML::Node& node, std::string_view prefix, std::span<const std::string_view> allowed) const;
  void check_map(const YAML::Node& node, std::string_view prefix,
                 std::initializer_list<std::string_view> allowed) const {
    check_map(node, prefix, std::span<const std::string_view>(allowed.begin(), allowed.size()));
  }
  // `node` must be a map (else "expected a map"). Also remembers the key lines of its empty values (see below).
  void require_map(const YAML::Node& node, std::string_view key) const;

 private:
  std::string file_;
  // yaml-cpp marks an empty value (`n_layers:` with nothing after it) where the next token starts, often the next
  // line; errors about such a value point at its key's line instead. Filled by require_map/check_map.
  mutable std::vector<std::pair<YAML::Node, int>> empty_value_lines_;
};

// "model" + "dim" -> "model.dim"; "" + "model" -> "model".
std::string join_key(std::string_view prefix, std::string_view key);
// How a node reads in an error's "got ..." part: the quoted scalar text (shown()), or "a map", "a list", "nothing".
std::string describe(const YAML::Node& node);
// User text as an error echoes it, so that an error stays one short line: control characters escaped ("\\n"), and
// cut to `max` characters with "..." (a 100 KB value is not echoed whole).
std::string shown(std::string_view text, size_t max = 60);
// "1..10000" / "(0, 64]" / "[0, 1e+06]": a range as errors state it.
std::string range_text(limits::IntRange r);
std::string range_text(limits::RealRange r);

}  // namespace tptune::yaml
