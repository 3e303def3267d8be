#include "plans/util/yaml_util.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>

#include "plans/util/error.h"
#include "plans/util/input_file.h"

namespace tptune::yaml {

YAML::Node parse(const std::string& text, const std::string& name) {
  try {
    return YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    // e.mark.line is 0-based; e.msg is yaml-cpp's message without the position prefix.
    throw Error(fmt::format("{}:{}: invalid YAML: {}", name, e.mark.line + 1, shown(e.msg, 200)));
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}: invalid YAML: {}", name, shown(e.msg, 200)));
  }
}

std::string read_file(const std::string& path, const std::string& what) {
  return read_input_file(path, fmt::format("{} YAML", what));
}

std::string join_key(std::string_view prefix, std::string_view key) {
  if (prefix.empty()) return std::string(key);
  return fmt::format("{}.{}", prefix, key);
}

std::string shown(std::string_view text, size_t max) {
  std::string out;
  for (char c : text) {
    if (out.size() >= max) return out + "...";
    const auto u = static_cast<unsigned char>(c);
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else if (u < 0x20 || u == 0x7f)
      out += fmt::format("\\x{:02x}", u);
    else
      out += c;
  }
  return out;
}

std::string range_text(limits::IntRange r) { return fmt::format("{}..{}", r.lo, r.hi); }

std::string range_text(limits::RealRange r) { return fmt::format("{}{}, {}]", r.lo_open ? "(" : "[", r.lo, r.hi); }

std::string describe(const YAML::Node& node) {
  if (!node.IsDefined() || node.IsNull()) return "nothing";
  if (node.IsMap()) return "a map";
  if (node.IsSequence()) return "a list";
  return fmt::format("'{}'", shown(node.Scalar()));
}

bool is_scalar(const YAML::Node& n) { return n.IsDefined() && n.IsScalar(); }

static int line_of(const YAML::Node& n) {
  if (!n.IsDefined()) return -1;
  const YAML::Mark m = n.Mark();
  return m.is_null() ? -1 : m.line + 1;
}

std::string YamlDoc::at(const YAML::Node& node, const YAML::Node& fallback) const {
  int line = line_of(node);
  if (node.IsDefined() && node.IsNull())
    for (const auto& [value, key_line] : empty_value_lines_)
      if (value.is(node)) line = key_line;
  if (line < 0) line = line_of(fallback);
  return line < 0 ? file_ : fmt::format("{}:{}", file_, line);
}

void YamlDoc::fail(const YAML::Node& node, std::string_view key, std::string_view expected) const {
  throw Error(fmt::format("{}: {}: expected {}, got {}", at(node), key, expected, describe(node)));
}

void YamlDoc::fail_msg(const YAML::Node& node, std::string_view key, std::string_view message) const {
  throw Error(fmt::format("{}: {}: {}", at(node), key, message));
}

// Decimal integer with optional sign; nothing else (no "1.0", "1e3", "12abc", "0x10").
static bool parse_int(const std::string& s, int64_t& out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t j = i; j < s.size(); ++j)
    if (s[j] < '0' || s[j] > '9') return false;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno == ERANGE || *end != '\0') return false;
  out = v;
  return true;
}

static bool parse_real(const std::string& s, double& out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno == ERANGE || *end != '\0' || !std::isfinite(v)) return false;
  // strtod also accepts hex floats and leading spaces; YAML numbers are plain decimals.
  for (char c : s)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'))
      return false;
  out = v;
  return true;
}

namespace {

// The one shape of the typed reads below: `node` as a scalar parsed by `parse` (parse_int, parse_real) and accepted by
// `ok`, else doc.fail(node, key, expected).
template <class T, class Ok>
T read_scalar(const YamlDoc& doc, const YAML::Node& node, std::string_view key, bool (*parse)(const std::string&, T&),
              Ok ok, std::string_view expected) {
  T v = 0;
  if (!is_scalar(node) || !parse(node.Scalar(), v) || !ok(v)) doc.fail(node, key, expected);
  return v;
}

constexpr auto kAnyValue = [](auto) { return true; };

}  // namespace

int64_t YamlDoc::integer(const YAML::Node& node, std::string_view key) const {
  return read_scalar<int64_t>(*this, node, key, parse_int, kAnyValue, "an integer");
}

int64_t YamlDoc::positive_integer(const YAML::Node& node, std::string_view key) const {
  return read_scalar<int64_t>(
      *this, node, key, parse_int, [](int64_t v) { return v >= 1; }, "a positive integer");
}

double YamlDoc::real(const YAML::Node& node, std::string_view key) const {
  return read_scalar<double>(*this, node, key, parse_real, kAnyValue, "a number");
}

double YamlDoc::positive_real(const YAML::Node& node, std::string_view key) const {
  return read_scalar<double>(
      *this, node, key, parse_real, [](double v) { return v > 0; }, "a positive number");
}

double YamlDoc::nonnegative_real(const YAML::Node& node, std::string_view key) const {
  return read_scalar<double>(
      *this, node, key, parse_real, [](double v) { return v >= 0; }, "a number >= 0");
}

int64_t YamlDoc::integer_in(const YAML::Node& node, std::string_view key, limits::IntRange r) const {
  int64_t v = 0;
  if (!is_scalar(node) || !parse_int(node.Scalar(), v) || v < r.lo || v > r.hi)
    fail(node, key, fmt::format("an integer in {}", range_text(r)));
  return v;
}

double YamlDoc::real_in(const YAML::Node& node, std::string_view key, limits::RealRange r) const {
  double v = 0;
  if (!is_scalar(node) || !parse_real(node.Scalar(), v) || v > r.hi || v < r.lo || (r.lo_open && v == r.lo))
    fail(node, key, fmt::format("a number in {}", range_text(r)));
  return v;
}

bool YamlDoc::boolean(const YAML::Node& node, std::string_view key) const {
  if (is_scalar(node)) {
    const std::string& s = node.Scalar();
    for (const char* t : {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})
      if (s == t) return true;
    for (const char* f : {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})
      if (s == f) return false;
  }
  fail(node, key, "true or false");
}

std::string YamlDoc::string(const YAML::Node& node, std::string_view key) const {
  if (!is_scalar(node) || node.Scalar().empty()) fail(node, key, "a string");
  return node.Scalar();
}

std::string YamlDoc::choice(const YAML::Node& node, std::string_view key,
                            const std::vector<std::string>& allowed) const {
  const std::string expected = fmt::format("one of {}", fmt::join(allowed, ", "));
  if (!is_scalar(node)) fail(node, key, expected);
  for (const auto& a : allowed)
    if (node.Scalar() == a) return a;
  fail(node, key, expected);
}

void YamlDoc::require_map(const YAML::Node& node, std::string_view key) const {
  if (!node.IsDefined() || !node.IsMap()) fail(node, key.empty() ? std::string_view("document") : key, "a map");
  for (auto it = node.begin(); it != node.end(); ++it)
    if (it->second.IsNull()) empty_value_lines_.emplace_back(it->second, line_of(it->first));
}

void YamlDoc::check_map(const YAML::Node& node, std::string_view prefix,
                        std::span<const std::string_view> allowed) const {
  require_map(node, prefix);
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const YAML::Node k = it->first;
    if (!k.IsScalar()) fail(k, prefix.empty() ? "document" : prefix, "keys that are plain names");
    const std::string& name = k.Scalar();
    bool ok = false;
    for (auto a : allowed) ok = ok || a == name;
    if (!ok)
      throw Error(fmt::format("{}: {}: unknown key; expected one of {}", at(k, node), join_key(prefix, shown(name)),
                              fmt::join(allowed, ", ")));
    if (!seen.insert(name).second)
      throw Error(fmt::format("{}: {}: duplicate key", at(k, node), join_key(prefix, shown(name))));
  }
}

}  // namespace tptune::yaml
