#pragma once
// Names of enumerators, for printing and parsing: one table per enum, indexed by the enumerator, instead of a switch
// for each direction.
//
//   constexpr std::string_view kMlpNames[] = {"swiglu", "gelu"};  // Mlp's enumerators, in declaration order
//   static_assert(std::size(kMlpNames) == enum_count(Mlp::gelu));
//   std::string_view to_string(Mlp m) { return name_of(kMlpNames, m); }
//   Mlp parse_mlp(std::string_view s, const std::string& where) { return parse_name<Mlp>(kMlpNames, s, where); }
//
// The enum's values must be 0, 1, 2, ... (the default numbering); the static_assert against the last enumerator keeps
// a table from falling behind its enum, and tests/plans/enum_names_test.cc checks every table round-trips.
// name_of() returns "?" for a value past the table (a cast from a bad integer). The header includes no fmt, so that
// nvcc-compiled sources may include the headers that use it.

#include <cstddef>
#include <iterator>
#include <string>
#include <string_view>

namespace tptune {

// The number of enumerators of an enum numbered 0, 1, 2, ... whose last enumerator is `last`.
template <typename E>
constexpr size_t enum_count(E last) {
  return static_cast<size_t>(last) + 1;
}

template <typename E, size_t N>
constexpr std::string_view name_of(const std::string_view (&names)[N], E value) {
  const auto index = static_cast<size_t>(value);
  return index < N ? names[index] : std::string_view("?");
}

// "a, b, c": names[0..n) in order, for error messages and help text.
std::string names_list(const std::string_view* names, size_t n);
// Throws tptune::Error "WHERE: expected one of a, b, c, got 'NAME'" (the list: names[0..n)).
[[noreturn]] void throw_unknown_name(const std::string_view* names, size_t n, std::string_view name,
                                     const std::string& where);

// The enumerator named `name`; throws tptune::Error "WHERE: expected one of a, b, c, got 'NAME'" otherwise.
template <typename E, size_t N>
E parse_name(const std::string_view (&names)[N], std::string_view name, const std::string& where) {
  for (size_t i = 0; i < N; ++i)
    if (names[i] == name) return static_cast<E>(i);
  throw_unknown_name(names, N, name, where);
}

}  // namespace tptune
