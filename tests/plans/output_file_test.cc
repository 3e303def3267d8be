// Writing outputs (plans/output_file.h): whole or not at all, never over an input, every failure one line naming the
// option, the path and the system's reason (issue 21, items 13 and 14).
#include "plans/output_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../error_text.h"

using namespace tptune;
using tptune::test::error_of;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "tptune-output-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string at(const std::string& name) const { return (path / name).string(); }
  // The names in the folder: a failed write must leave no temporary file behind.
  size_t entries() const { return static_cast<size_t>(std::distance(fs::directory_iterator(path), {})); }
};

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void put(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Files may not grow past `bytes` while it lives (RLIMIT_FSIZE; SIGXFSZ ignored, so a write past it fails with
// EFBIG instead of ending the process): a disk that fills up, on demand, for root too.
struct FileSizeLimit {
  rlimit old{};
  void (*old_handler)(int) = nullptr;
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    old_handler = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old;
    lim.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old);
    ::signal(SIGXFSZ, old_handler);
  }
};

}  // namespace

TEST_CASE("outputs: written whole, with a new file's usual mode, an existing file's mode kept", "[output_file]") {
  TempDir d;
  const std::string p = d.at("report.html");
  write_output("--report", p, "<html>1</html>");
  CHECK(slurp(p) == "<html>1</html>");
  const mode_t mask = ::umask(0);
  ::umask(mask);
  CHECK((fs::status(p).permissions() & fs::perms::all) == static_cast<fs::perms>(0666 & ~mask));
  ::chmod(p.c_str(), 0640);
  write_output("--report", p, "<html>2</html>");
  CHECK(slurp(p) == "<html>2</html>");
  CHECK((fs::status(p).permissions() & fs::perms::all) == static_cast<fs::perms>(0640));
  CHECK(d.entries() == 1);  // no temporary file left
}

TEST_CASE("outputs: a write that fails leaves the previous file as it was", "[output_file]") {
  TempDir d;
  const std::string p = d.at("baseline.json");
  put(p, "{\"committed\": true}\n");
  {
    const FileSizeLimit limit(4096);
    CHECK(error_of([&] { write_output("--baseline", p, std::string(100000, 'x')); }) ==
          "--baseline " + p + ": cannot write: File too large");
  }
  CHECK(slurp(p) == "{\"committed\": true}\n");
  CHECK(d.entries() == 1);
}

TEST_CASE("outputs: several outputs, one failing, replace none", "[output_file]") {
  TempDir d;
  const std::string plan = d.at("best.yaml"), trace = d.at("trace.json");
  put(plan, "old plan\n");
  put(trace, "old trace\n");
  {
    const FileSizeLimit limit(4096);
    // The plan (small) is written first, the trace (large) fails: the plan must not be replaced either.
    CHECK(error_of([&] {
            write_outputs({{"--out-plan", plan, "new plan\n"}, {"--trace", trace, std::string(100000, 't')}});
          }) == "--trace " + trace + ": cannot write: File too large");
  }
  CHECK(slurp(plan) == "old plan\n");
  CHECK(slurp(trace) == "old trace\n");
  CHECK(d.entries() == 2);
  write_outputs({{"--out-plan", plan, "new plan\n"}, {"--trace", trace, "new trace\n"}});
  CHECK(slurp(plan) == "new plan\n");
  CHECK(slurp(trace) == "new trace\n");
}

TEST_CASE("outputs: a folder that cannot hold the file is one line", "[output_file]") {
  TempDir d;
  const std::string file = d.at("file");
  put(file, "x");
  CHECK(error_of([&] { write_output("--json", file + "/out.json", "{}"); }) ==
        "--json " + file + "/out.json: cannot write: Not a directory");
  CHECK(error_of([&] { write_output("--trace", d.at("no/such/t.json"), "{}"); }) ==
        "--trace " + d.at("no/such/t.json") + ": cannot write: No such file or directory");
  CHECK(error_of([&] { write_output("--report", d.path.string(), "x"); }) ==
        "--report " + d.path.string() + ": is a directory (expected a file to write)");
  if (::geteuid() != 0) {  // root writes into read-only folders
    const std::string ro = d.at("ro");
    fs::create_directory(ro);
    put(ro + "/r.html", "previous");
    ::chmod(ro.c_str(), 0555);
    CHECK(error_of([&] { write_output("--report", ro + "/r.html", "new"); }) ==
          "--report " + ro + "/r.html: cannot write: Permission denied");
    CHECK(slurp(ro + "/r.html") == "previous");
    ::chmod(ro.c_str(), 0755);
  }
}

TEST_CASE("outputs: devices are written in place, a symlink's target is replaced", "[output_file]") {
  write_output("--json", "/dev/null", "anything");  // not replaced by a regular file
  CHECK(fs::is_character_file("/dev/null"));
  CHECK(error_of([] { write_output("--json", "/dev/full", "{}"); }) ==
        "--json /dev/full: cannot write: No space left on device");
  TempDir d;
  const std::string real = d.at("real.yaml"), link = d.at("link.yaml");
  put(real, "old");
  fs::create_symlink(real, link);
  write_output("--out-plan", link, "new");
  CHECK(fs::is_symlink(link));
  CHECK(slurp(real) == "new");
}

TEST_CASE("outputs: a stream abandoned before commit leaves nothing", "[output_file]") {
  TempDir d;
  const std::string p = d.at("explain.json");
  put(p, "before");
  {
    OutputFile f("--json", p);
    f.stream() << "half a docu";
  }  // an exception on the way: no commit
  CHECK(slurp(p) == "before");
  CHECK(d.entries() == 1);
  OutputFile f("--json", p);
  f.stream() << "whole";
  f.commit();
  CHECK(slurp(p) == "whole");
}

TEST_CASE("outputs: an output that is an input is refused, however it is spelled", "[output_file]") {
  TempDir d;
  const std::string cfg = d.at("c.yaml");
  put(cfg, "model: {preset: tiny-llama}\n");
  const std::vector<NamedPath> inputs{{"config", cfg}, {"--hf-config", ""}};
  CHECK(error_of([&] {
          refuse_overwriting_inputs({{"--out-plan", cfg}}, inputs);
        }) == "--out-plan " + cfg + ": is also the config " + cfg +
                  "; refusing to overwrite an input (write to another path)");
  const std::string dotted = d.path.string() + "/./c.yaml";
  CHECK(error_of([&] {
          refuse_overwriting_inputs({{"--out", dotted}}, inputs);
        }).starts_with("--out " + dotted + ": is also the config"));
  const std::string hard = d.at("hard.yaml"), soft = d.at("soft.yaml");
  fs::create_hard_link(cfg, hard);
  fs::create_symlink(cfg, soft);
  CHECK(error_of([&] { refuse_overwriting_inputs({{"--json", hard}}, inputs); }).starts_with("--json " + hard));
  CHECK(error_of([&] { refuse_overwriting_inputs({{"--json", soft}}, inputs); }).starts_with("--json " + soft));
  // Two outputs on one path (neither exists yet).
  CHECK(error_of([&] {
          refuse_overwriting_inputs({{"--json", d.at("o.json")}, {"--trace", d.at("o.json")}}, inputs);
        }) == "--trace " + d.at("o.json") + ": is also the --json output (write each to its own path)");
  // Standard output, devices and distinct files pass.
  CHECK(error_of([&] {
          refuse_overwriting_inputs(
              {{"--json", "-"}, {"--trace", "/dev/null"}, {"--report", "/dev/null"}, {"--out", d.at("new.yaml")}},
              inputs);
        }) == "(no error)");
}
