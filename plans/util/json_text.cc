#include "plans/util/json_text.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <vector>

#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

using nlohmann::json;

// nlohmann's DOM builder with a depth limit: start_object/start_array past kMaxJsonDepth stop the parse (returning
// false) before the deeper value is built, and parse errors are kept (with their byte offset) instead of thrown. A key
// stated twice in one object stops it too (nlohmann keeps the last silently: `"hidden_size": 4096, "hidden_size":
// 8192` read as 8192), the two keys kept by their position among the document's keys.
class BoundedDom {
 public:
  explicit BoundedDom(json& root) : dom_(root, false) {}
  bool null() { return dom_.null(); }
  bool boolean(bool v) { return dom_.boolean(v); }
  bool number_integer(json::number_integer_t v) { return dom_.number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return dom_.number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) { return dom_.number_float(v, s); }
  bool string(json::string_t& v) { return dom_.string(v); }
  bool binary(json::binary_t& v) { return dom_.binary(v); }
  bool key(json::string_t& v) {
    const size_t index = keys_seen_++;
    if (!object_keys_.empty()) {
      const auto [it, fresh] = object_keys_.back().emplace(v, index);
      if (!fresh) {
        duplicate_ = Duplicate{v, it->second, index};
        return false;
      }
    }
    return dom_.key(v);
  }
  bool start_object(std::size_t n) {
    if (!deeper()) return false;
    object_keys_.emplace_back();
    return dom_.start_object(n);
  }
  bool start_array(std::size_t n) { return deeper() && dom_.start_array(n); }
  bool end_object() {
    --depth_;
    object_keys_.pop_back();
    return dom_.end_object();
  }
  bool end_array() {
    --depth_;
    return dom_.end_array();
  }
  template <class Exception>
  bool parse_error(std::size_t byte, const std::string& /*token*/, const Exception& e) {
    error_byte_ = byte;
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: <what>" (or out_of_range.406
    // "number overflow parsing '1e400'"); keep <what>.
    std::string what = e.what();
    if (what.starts_with("[json.exception.") && what.find("] ") != std::string::npos)
      what = what.substr(what.find("] ") + 2);
    if (what.starts_with("parse error") && what.find(": ") != std::string::npos)
      what = what.substr(what.find(": ") + 2);
    if (e.id == 406) what += " (a number past the range of a double, about 1.8e308)";
    error_ = what;
    return false;
  }

  // A key stated twice in one object: the key, and the positions of its two statements among the document's keys.
  struct Duplicate {
    std::string key;
    size_t first = 0, second = 0;
  };
  const std::optional<Duplicate>& duplicate() const { return duplicate_; }
  bool too_deep() const { return too_deep_; }
  size_t error_byte() const { return error_byte_; }
  const std::string& error() const { return error_; }

 private:
  bool deeper() {
    if (++depth_ <= kMaxJsonDepth) return true;
    too_deep_ = true;
    return false;
  }
  nlohmann::detail::json_sax_dom_parser<json> dom_;
  int depth_ = 0;
  bool too_deep_ = false;
  std::vector<std::map<std::string, size_t>> object_keys_;  // [open object] its keys -> their position
  size_t keys_seen_ = 0;
  std::optional<Duplicate> duplicate_;
  size_t error_byte_ = 0;
  std::string error_;
};

// The byte offset (0-based) of the bracket that opens level `depth` + 1, outside strings; the text's size if none.
size_t deeper_than(const std::string& text, int depth) {
  int d = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++d > depth) return i;
    } else if (c == '}' || c == ']') {
      --d;
    }
  }
  return text.size();
}

// The byte offset (0-based) of the `n`-th key (0-based, in document order) of a text that parsed up to it: a string
// followed by ':' outside strings; the text's size if none.
size_t nth_key(const std::string& text, size_t n) {
  size_t keys = 0, start = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_string) {
      if (c == '"') in_string = true, start = i;
      continue;
    }
    if (c == '\\') {
      ++i;
    } else if (c == '"') {
      in_string = false;
      size_t j = i + 1;
      while (j < text.size() && (text[j] == ' ' || text[j] == '\t' || text[j] == '\n' || text[j] == '\r')) ++j;
      if (j < text.size() && text[j] == ':' && keys++ == n) return start;
    }
  }
  return text.size();
}

}  // namespace

int line_of_byte(const std::string& text, size_t byte) {
  const size_t end = std::min(byte == 0 ? 0 : byte - 1, text.size());
  return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(end), '\n'));
}

nlohmann::json parse_json_text(const std::string& text, const std::string& name, std::string_view expected) {
  json root;
  BoundedDom dom(root);
  if (json::sax_parse(text, &dom)) return root;
  const std::string exp = expected.empty() ? "" : fmt::format(" (expected {})", expected);
  if (dom.too_deep())
    throw Error(fmt::format("{}:{}: invalid JSON{}: nested deeper than {} levels", name,
                            line_of_byte(text, deeper_than(text, kMaxJsonDepth) + 1), exp, kMaxJsonDepth));
  if (const auto& d = dom.duplicate())
    throw Error(
        fmt::format("{}:{}: invalid JSON{}: duplicate key \"{}\" (first on line {}): a key is stated once per "
                    "object",
                    name, line_of_byte(text, nth_key(text, d->second) + 1), exp, yaml::shown(d->key, 60),
                    line_of_byte(text, nth_key(text, d->first) + 1)));
  throw Error(fmt::format("{}:{}: invalid JSON{}: {}", name, line_of_byte(text, dom.error_byte()), exp,
                          yaml::shown(dom.error(), 200)));
}

std::string json_dump(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, json::error_handler_t::replace);
}

std::string describe_json(const nlohmann::json& v, size_t max) { return yaml::shown(json_dump(v), max); }

std::string json_key(std::string_view path, std::string_view key) {
  if (path.empty()) return std::string(key);
  return fmt::format("{}.{}", path, key);
}

void JsonDoc::fail(std::string_view key, std::string_view message) const {
  throw Error(fmt::format("{}: {}: {}", file_, key, message));
}

void JsonDoc::fail(std::string_view key, std::string_view expected, const nlohmann::json& v) const {
  fail(key, fmt::format("expected {}, got {}", expected, describe_json(v)));
}

const nlohmann::json* JsonDoc::find(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  if (!obj.is_object()) fail(path.empty() ? "top level" : path, "an object", obj);
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& JsonDoc::member(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  if (!obj.is_object()) fail(path.empty() ? "top level" : path, "an object", obj);
  auto it = obj.find(key);
  if (it == obj.end()) fail(json_key(path, key), "missing");
  return *it;
}

std::string JsonDoc::string(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  return string_value(member(obj, path, key), json_key(path, key));
}

bool JsonDoc::boolean(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  const json& v = member(obj, path, key);
  if (!v.is_boolean()) fail(json_key(path, key), "true or false", v);
  return v.get<bool>();
}

int64_t JsonDoc::integer(const nlohmann::json& obj, std::string_view path, std::string_view key,
                         limits::IntRange r) const {
  return integer_value(member(obj, path, key), json_key(path, key), r);
}

double JsonDoc::number(const nlohmann::json& obj, std::string_view path, std::string_view key,
                       limits::RealRange r) const {
  return number_value(member(obj, path, key), json_key(path, key), r);
}

const nlohmann::json& JsonDoc::object(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  const json& v = member(obj, path, key);
  if (!v.is_object()) fail(json_key(path, key), "an object", v);
  return v;
}

const nlohmann::json& JsonDoc::array(const nlohmann::json& obj, std::string_view path, std::string_view key) const {
  const json& v = member(obj, path, key);
  if (!v.is_array()) fail(json_key(path, key), "a list", v);
  return v;
}

std::string JsonDoc::string_value(const nlohmann::json& v, std::string_view key) const {
  if (!v.is_string()) fail(key, "a string", v);
  return v.get<std::string>();
}

int64_t JsonDoc::integer_value(const nlohmann::json& v, std::string_view key, limits::IntRange r) const {
  // Without an upper bound (r.hi INT64_MAX) the bound is named only to a value past it: 2^64 - 1 is a non-negative
  // integer, and "expected a non-negative integer, got 18446744073709551615" would not say what is wrong.
  const bool past_int64 = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(r.hi);
  const std::string expected = r.hi < std::numeric_limits<int64_t>::max() || past_int64
                                   ? fmt::format("an integer in {}", yaml::range_text(r))
                               : r.lo == 0 ? std::string("a non-negative integer")
                                           : fmt::format("an integer of at least {}", r.lo);
  // Unsigned first: get<int64_t>() of a value past INT64_MAX would wrap.
  if (v.is_number_unsigned()) {
    if (r.hi < 0 || v.get<uint64_t>() > static_cast<uint64_t>(r.hi) || static_cast<int64_t>(v.get<uint64_t>()) < r.lo)
      fail(key, expected, v);
    return static_cast<int64_t>(v.get<uint64_t>());
  }
  if (!v.is_number_integer() || v.get<int64_t>() < r.lo || v.get<int64_t>() > r.hi) fail(key, expected, v);
  return v.get<int64_t>();
}

double JsonDoc::number_value(const nlohmann::json& v, std::string_view key, limits::RealRange r) const {
  const std::string expected = fmt::format("a number in {}", yaml::range_text(r));
  if (!v.is_number()) fail(key, expected, v);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < r.lo || (r.lo_open && d == r.lo) || d > r.hi) fail(key, expected, v);
  return d;
}

}  // namespace tptune
