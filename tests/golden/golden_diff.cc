// golden_diff EXPECTED_DIR ACTUAL_DIR CASES_FILE [--rel-tol 1e-9] [--report-only]
//
// Compares the golden `tp-plan simulate --json` outputs (EXPECTED_DIR/<case>.json, committed) with a fresh run
// (ACTUAL_DIR/<case>.json) and prints a readable summary: which case, which number, old -> new, relative change.
//
//   fails (exit 1) when   a number moved by more than --rel-tol relative (|new - old| > tol x max(|old|, |new|),
//                         exact 0 compared absolutely against tol), a string or boolean changed, a case of
//                         CASES_FILE has no golden file, or a golden file's case is no longer in CASES_FILE
//   reports only          JSON fields that were added or removed (a newer report format; the lead regenerates)
//   ignores               the version stamp "tptune" ({"version", "git_hash"} of plans/version.h): it names the
//                         build, not the prediction, and changes with every commit
//   --report-only         prints the same summary and exits 0 (tests/golden/regenerate.sh)
//
// Arrays of objects that carry a "name" (top_ops) are matched by name and phase, not by position, so that a reordered
// list shows the numbers that moved rather than every position.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Change {
  std::string path, old_value, new_value;
  double rel = 0;  // relative change of a number (signed), NaN for other changes
};

struct CaseDiff {
  std::vector<Change> moved;                // fail
  std::vector<std::string> added, removed;  // fields: report only
};

double tol = 1e-9;

std::string short_value(const json& v) {
  if (v.is_number_float()) return fmt::format("{:.10g}", v.get<double>());
  std::string s = v.dump();
  return s.size() > 40 ? s.substr(0, 37) + "..." : s;
}

std::string element_key(const json& e) {
  std::string k = e.at("name").is_string() ? e.at("name").get<std::string>() : e.at("name").dump();
  if (e.contains("phase") && e.at("phase").is_string()) k += " [" + e.at("phase").get<std::string>() + "]";
  return k;
}

bool keyed_array(const json& a) {
  if (a.empty()) return false;
  std::set<std::string> keys;
  for (const json& e : a) {
    if (!e.is_object() || !e.contains("name")) return false;
    if (!keys.insert(element_key(e)).second) return false;  // duplicate keys: compare by position
  }
  return true;
}

void diff(const json& o, const json& n, const std::string& path, CaseDiff& d);

void diff_members(const std::map<std::string, const json*>& o, const std::map<std::string, const json*>& n,
                  const std::string& path, CaseDiff& d) {
  for (const auto& [k, v] : o) {
    auto it = n.find(k);
    if (it == n.end())
      d.removed.push_back(path + k);
    else
      diff(*v, *it->second, path + k, d);
  }
  for (const auto& [k, v] : n)
    if (!o.count(k)) d.added.push_back(path + k);
}

void diff(const json& o, const json& n, const std::string& path, CaseDiff& d) {
  if (o.is_number() && n.is_number()) {
    const double a = o.get<double>(), b = n.get<double>();
    const double scale = std::max(std::abs(a), std::abs(b));
    if (std::abs(b - a) > tol * (scale > 0 ? scale : 1))
      d.moved.push_back({path, short_value(o), short_value(n), a != 0 ? (b - a) / std::abs(a) : INFINITY});
    return;
  }
  if (o.is_object() && n.is_object()) {
    std::map<std::string, const json*> om, nm;
    for (auto it = o.begin(); it != o.end(); ++it) om[it.key()] = &it.value();
    for (auto it = n.begin(); it != n.end(); ++it) nm[it.key()] = &it.value();
    diff_members(om, nm, path.empty() ? "" : path + ".", d);
    return;
  }
  if (o.is_array() && n.is_array()) {
    if (keyed_array(o) && keyed_array(n)) {
      std::map<std::string, const json*> om, nm;
      for (const json& e : o) om[element_key(e)] = &e;
      for (const json& e : n) nm[element_key(e)] = &e;
      // Elements that appear or disappear are changes of the prediction (an op entered the top list), not fields.
      for (const auto& [k, v] : om)
        if (!nm.count(k)) d.moved.push_back({path + "[" + k + "]", "present", "absent", NAN});
      for (const auto& [k, v] : nm)
        if (!om.count(k)) d.moved.push_back({path + "[" + k + "]", "absent", "present", NAN});
      for (const auto& [k, v] : om)
        if (nm.count(k)) diff(*v, *nm[k], path + "[" + k + "]", d);
      return;
    }
    const size_t common = std::min(o.size(), n.size());
    for (size_t i = 0; i < common; ++i) diff(o[i], n[i], fmt::format("{}[{}]", path, i), d);
    if (o.size() != n.size())
      d.moved.push_back({path + ".length", std::to_string(o.size()), std::to_string(n.size()), NAN});
    return;
  }
  if (o != n) d.moved.push_back({path, short_value(o), short_value(n), NAN});
}

// A golden or fresh output without its version stamp (the top-level "tptune" object: which build wrote it).
json read(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw std::runtime_error(p.string() + ": cannot read");
  json j;
  try {
    j = json::parse(in);
  } catch (const json::parse_error& e) {
    throw std::runtime_error(p.string() + ": not JSON: " + e.what());
  }
  if (j.is_object()) j.erase("tptune");
  return j;
}

std::vector<std::string> read_cases(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error(file + ": cannot read");
  std::vector<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    const auto start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    const auto colon = line.find(':', start);
    if (colon == std::string::npos) throw std::runtime_error(file + ": expected 'NAME: CONFIG ARGS...', got " + line);
    names.push_back(line.substr(start, colon - start));
  }
  return names;
}

constexpr size_t kDetailedCases = 3, kDetailLines = 8;

std::string clip(const std::string& s, size_t width) {
  return s.size() > width ? "..." + s.substr(s.size() - (width - 3)) : s;
}

std::string pct(double rel) {
  if (std::isnan(rel)) return "";
  if (std::isinf(rel)) return "(was 0)";
  return fmt::format("({:+.4f}%)", 100 * rel);
}

// The headline numbers first, then the rest by |relative change| (non-numeric changes last).
void sort_changes(std::vector<Change>& v) {
  auto rank = [](const Change& c) {
    static const char* headline[] = {"step_time_ms", "tokens_per_second_per_gpu", "peak_memory_gib", "mfu",
                                     "fits_in_memory"};
    for (size_t i = 0; i < std::size(headline); ++i)
      if (c.path == headline[i]) return static_cast<int>(i);
    return 100;
  };
  std::stable_sort(v.begin(), v.end(), [&](const Change& a, const Change& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    const double x = std::isnan(a.rel) ? -1 : std::abs(a.rel), y = std::isnan(b.rel) ? -1 : std::abs(b.rel);
    return x > y;
  });
}

std::string rel_text(double rel) {
  if (std::isnan(rel)) return "";
  if (std::isinf(rel)) return "(was 0)";
  return fmt::format("({:+.3e}, {:+.4f}%)", rel, 100 * rel);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos;
  bool report_only = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--report-only")
      report_only = true;
    else if (a == "--rel-tol" && i + 1 < argc)
      tol = std::strtod(argv[++i], nullptr);
    else
      pos.push_back(a);
  }
  if (pos.size() != 3 || !(tol >= 0)) {
    fmt::print(stderr, "usage: golden_diff EXPECTED_DIR ACTUAL_DIR CASES_FILE [--rel-tol 1e-9] [--report-only]\n");
    return 2;
  }
  try {
    const fs::path expected = pos[0], actual = pos[1];
    const std::vector<std::string> cases = read_cases(pos[2]);
    const std::set<std::string> listed(cases.begin(), cases.end());
    int failures = 0, changed = 0, unchanged = 0;
    std::vector<std::string> problems;
    std::map<std::string, std::pair<int, double>> by_field;  // field (case-independent path) -> cases, max |rel|
    std::string detail, table;
    size_t detailed = 0;
    for (const std::string& c : cases) {
      const fs::path e = expected / (c + ".json"), a = actual / (c + ".json");
      if (!fs::exists(a)) {
        problems.push_back(fmt::format("  {}: no output from this run (did tp-plan fail? see above)", c));
        ++failures;
        continue;
      }
      if (!fs::exists(e)) {
        problems.push_back(fmt::format("  {}: new case without a golden file (run tests/golden/regenerate.sh)", c));
        ++failures;
        continue;
      }
      CaseDiff d;
      diff(read(e), read(a), "", d);
      if (d.moved.empty()) {
        ++unchanged;
      } else {
        ++changed;
        ++failures;
        sort_changes(d.moved);
        const Change* step = nullptr;
        for (const Change& m : d.moved)
          if (m.path == "step_time_ms") step = &m;
        const Change* top = &d.moved.front();
        for (const Change& m : d.moved)
          if (!std::isnan(m.rel) && (std::isnan(top->rel) || std::abs(m.rel) > std::abs(top->rel))) top = &m;
        table += fmt::format(
            "  {:<34} {:>5}  {:>40}  {}\n", c, d.moved.size(),
            step ? fmt::format("{} -> {} {}", step->old_value, step->new_value, pct(step->rel)) : "unchanged",
            fmt::format("{} {} -> {} {}", clip(top->path, 60), top->old_value, top->new_value, pct(top->rel)));
        if (detailed < kDetailedCases) {
          ++detailed;
          detail += fmt::format("  {}: {} value(s) moved\n", c, d.moved.size());
          for (size_t i = 0; i < d.moved.size() && i < kDetailLines; ++i) {
            const Change& m = d.moved[i];
            detail +=
                fmt::format("    {:<70} {} -> {}  {}\n", clip(m.path, 70), m.old_value, m.new_value, rel_text(m.rel));
          }
          if (d.moved.size() > kDetailLines)
            detail += fmt::format("    ... and {} more\n", d.moved.size() - kDetailLines);
        }
        for (const Change& m : d.moved) {
          auto& f = by_field[m.path];
          ++f.first;
          if (!std::isnan(m.rel)) f.second = std::max(f.second, std::abs(m.rel));
        }
      }
      for (const auto& f : d.added)
        problems.push_back(fmt::format("  {}: field added: {} (reported, not a failure)", c, f));
      for (const auto& f : d.removed)
        problems.push_back(fmt::format("  {}: field removed: {} (reported, not a failure)", c, f));
    }
    for (const auto& entry : fs::directory_iterator(expected)) {
      if (entry.path().extension() != ".json") continue;
      const std::string c = entry.path().stem().string();
      if (!listed.count(c)) {
        problems.push_back(fmt::format("  {}: golden file of a case no longer in {} (removed case)", c, pos[2]));
        ++failures;
      }
    }
    fmt::print("golden: {} cases: {} unchanged, {} changed beyond {:g} relative\n", cases.size(), unchanged, changed,
               tol);
    if (!table.empty()) {
      fmt::print("  {:<34} {:>5}  {:>40}  {}\n", "case", "moved", "step_time_ms (relative change)",
                 "largest relative change");
      fmt::print("{}", table);
    }
    if (!detail.empty())
      fmt::print("details (the first {} changed cases, largest changes first):\n{}", kDetailedCases, detail);
    if (!by_field.empty()) {
      std::vector<std::pair<std::string, std::pair<int, double>>> fields(by_field.begin(), by_field.end());
      std::stable_sort(fields.begin(), fields.end(),
                       [](const auto& x, const auto& y) { return x.second.first > y.second.first; });
      fmt::print("  by field (cases moved, largest |relative change|):\n");
      for (size_t i = 0; i < fields.size() && i < 10; ++i)
        fmt::print("    {:<70} {:3} case(s)  {}\n", clip(fields[i].first, 70), fields[i].second.first,
                   fields[i].second.second > 0 ? fmt::format("{:.3e}", fields[i].second.second) : "");
      if (fields.size() > 10) fmt::print("    ... and {} more fields\n", fields.size() - 10);
    }
    for (const auto& p : problems) fmt::print("{}\n", p);
    if (failures && !report_only) {
      fmt::print("golden: FAIL: if the change is intended, run tests/golden/regenerate.sh and commit the result\n");
      return 1;
    }
    if (!failures) fmt::print("golden: PASS\n");
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "golden_diff: error: {}\n", e.what());
    return 2;
  }
}
