#pragma once
// The one error mechanism of tptune.
//
// Every error a user can cause is a tptune::Error whose message already says *where* (a file:line of a
// YAML file, or a module FQN) and *what was expected*, in one line. Tools catch it at the top, print
// `tp-plan: error: <message>` and exit with status 2. Library code never prints and never exits.
//
//   throw Error(fmt::format("{}:{}: model.n_heads: expected a positive integer, got '{}'", file, line, v));
//   throw ModuleError("layers.0.attention.wo", "input arrives as R but the style declares S(-1)");

#include <stdexcept>
#include <string>
#include <string_view>

namespace tptune {

// A message on one line: a line break that a user's text brought into it (an echoed value, a parser's message) is
// shown as "\n" / "\r". Sites echo user text through yaml::shown() (plans/util/yaml_util.h), which also bounds its
// length; this is the last guard, so that `tp-plan: error: ...` is one line whatever a site forgot.
inline std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (char c : message) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(one_line(message)) {}
};

// An error about one module of the model, named by its FQN: "<fqn>: <what>".
inline Error ModuleError(const std::string& fqn, const std::string& what) { return Error(fqn + ": " + what); }

}  // namespace tptune
