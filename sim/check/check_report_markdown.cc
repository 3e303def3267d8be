// `tp-plan check --format markdown`: the report as a pull-request comment (sim/check/check_report.h). GitHub-flavoured
// markdown: a heading with the verdict, the metrics as a table, what moved as tables. Every name a user wrote (model,
// plan, op) is a code span with `|` escaped, so that it neither breaks a table nor reads as emphasis.
#include <fmt/format.h>

#include <iterator>

#include "sim/check/check_report.h"

namespace tptune {

namespace {

template <typename... T>
void append(std::string& o, fmt::format_string<T...> f, T&&... args) {
  fmt::format_to(std::back_inserter(o), f, std::forward<T>(args)...);
}

// `s` as a code span inside a table cell: pipes escaped (GFM reads \| inside code spans in tables), backticks and
// line breaks replaced (neither can be escaped in a code span).
std::string code(const std::string& s) {
  std::string out = "`";
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '`')
      out += '\'';
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out + "`";
}

void append_deltas(std::string& o, const char* title, const char* column, const std::vector<Delta>& d, size_t top_n,
                   int precision) {
  if (d.empty()) return;
  append(o, "\n{}\n\n| {} | baseline | now | delta |\n| --- | ---: | ---: | ---: |\n", title, column);
  for (size_t i = 0; i < d.size() && i < top_n; ++i) {
    const Delta& x = d[i];
    const char* tag = x.only_base ? " (gone)" : x.only_now ? " (new)" : "";
    append(o, "| {}{} | {:.{}f} | {:.{}f} | {:+.{}f} |\n", code(x.what), tag, x.base, precision, x.now, precision,
           x.delta(), precision);
  }
  if (d.size() > top_n) append(o, "\n... and {} more\n", d.size() - top_n);
}

}  // namespace

std::string format_check_markdown(const CheckResult& r, const std::string& baseline_path, size_t top_n) {
  std::string o;
  append(o, "### tp-plan check: {}\n\n", check_verdict(r));
  // What is predicted, in a fixed order, for the keys the baseline records.
  std::string setup;
  for (const char* key : {"model", "plan", "tp", "dp", "gpu", "cluster"}) {
    auto it = r.setup.find(key);
    if (it != r.setup.end()) append(setup, "{}{} {}", setup.empty() ? "" : ", ", key, code(it->second));
  }
  if (!setup.empty()) append(o, "Predicted: {}.\n\n", setup);
  append(o, "Baseline {}; max slowdown {}, max memory growth {}.\n", code(baseline_path),
         percent_text(r.tolerances.max_slowdown_percent), percent_text(r.tolerances.max_memory_growth_percent));
  if (r.other_build()) append(o, "\n> **Baseline from another tptune**: {}.\n", build_note(r));
  if (!r.setup_changes.empty()) {
    append(o, "\n**Setup changed**:");
    for (size_t i = 0; i < r.setup_changes.size(); ++i) append(o, "{} {}", i ? "," : "", code(r.setup_changes[i]));
    append(o, "\n");
  }

  append(o, "\n| | baseline | now | change | verdict |\n| --- | ---: | ---: | ---: | --- |\n");
  for (const MetricCheck& m : r.metrics) {
    std::string verdict = metric_verdict(m);
    if (m.fail) verdict = "**FAIL**" + verdict.substr(4);  // "FAIL: ..." with the word in bold
    append(o, "| {} | {:.2f} | {:.2f} | {:+.2f} % | {} |\n", m.name, m.base, m.now, m.change_percent, verdict);
  }
  append(o, "| fits in memory | {} | {} | | {} |\n", r.base_fits ? "yes" : "no", r.now_fits ? "yes" : "no",
         r.base_fits && !r.now_fits ? "**FAIL**: no longer fits" : "ok");

  if (!r.breakdown.empty() || !r.kinds.empty() || !r.ops.empty() || !r.memory.empty()) append(o, "\n#### What moved\n");
  append_deltas(o, "Where the step time moved (ms; these add up to it):", "term", r.breakdown, top_n, 2);
  append_deltas(o, "Op classes that moved most (busy ms per step):", "op class", r.kinds, top_n, 2);
  append_deltas(o, "Ops that moved most (ms per step, all instances):", "op", r.ops, top_n, 3);
  append_deltas(o, "Memory that moved (GiB per GPU):", "term", r.memory, top_n, 3);
  o += check_advice(
      r, {.moved = "\nThe prediction moved within the tolerances; refresh the baseline with `--update` if intended.\n",
          .regression = "\nIf this change is intended, write the new baseline with `--update` and commit it.\n",
          .other_build = "\nBeyond the tolerances against another tptune's baseline (exit {}): see the note above.\n"});
  return o;
}

}  // namespace tptune
