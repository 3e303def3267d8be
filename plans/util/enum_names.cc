// The error of parse_name() (plans/util/enum_names.h), out of line so that the header needs no fmt.
#include "plans/util/enum_names.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

namespace tptune {

std::string names_list(const std::string_view* names, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out += names[i];
  }
  return out;
}

void throw_unknown_name(const std::string_view* names, size_t n, std::string_view name, const std::string& where) {
  throw Error(fmt::format("{}: expected one of {}, got '{}'", where, names_list(names, n), yaml::shown(name)));
}

}  // namespace tptune
