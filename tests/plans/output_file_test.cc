// Writing outputs (plans/util/output_file.h): whole or not at all, never over an input, every failure one line naming
// the option, the path and the system's reason (issue 21, items 13 and 14).
#include "plans/util/output_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "../error_text.h"
#include "../temp_dir.h"
#include "plans/util/input_file.h"

using namespace tptune;
using tptune::test::error_of;
using tptune::test::TempDir;
namespace fs = std::filesystem;

namespace {

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

// Issue 37, class 2: every file a run reads, by any route (here read_input_file itself, as a config's model.hf_config
// or a search.plans entry is read), is protected from every output, with no list of inputs given.
TEST_CASE("outputs: a file the run has read is refused by every output, however the output reaches it",
          "[output_file]") {
  TempDir d;
  forget_inputs_read();
  const std::string hf = d.at("config.json"), text = "{\"hidden_size\": 64}\n";
  put(hf, text);
  const std::string refusal =
      ": is also the transformers config.json " + hf + "; refusing to overwrite an input (write to another path)";
  // Before it is read it is just a file.
  CHECK(!input_read_at(hf));
  CHECK(read_input_file(hf, "transformers config.json") == text);
  REQUIRE(input_read_at(hf));
  CHECK(input_read_at(hf)->what == "transformers config.json");
  const std::string dotted = d.path.string() + "/./config.json", hard = d.at("hard.json"), soft = d.at("soft.json");
  fs::create_hard_link(hf, hard);
  fs::create_symlink(hf, soft);
  CHECK(error_of([&] { write_output("--json", hf, "{}"); }) == "--json " + hf + refusal);
  CHECK(error_of([&] { write_output("--json", dotted, "{}"); }) == "--json " + dotted + refusal);
  CHECK(error_of([&] { write_output("--out-plan", hard, "x"); }) == "--out-plan " + hard + refusal);
  CHECK(error_of([&] { write_output("--trace", soft, "x"); }) == "--trace " + soft + refusal);
  CHECK(error_of([&] { OutputFile f("--json", hf); }) == "--json " + hf + refusal);
  // Of several outputs, none is written: the first is fine, the second is the input.
  CHECK(error_of([&] {
          write_outputs({{"--json", d.at("ok.json"), "{}"}, {"--report", hf, "<html>"}});
        }) == "--report " + hf + refusal);
  CHECK(!fs::exists(d.at("ok.json")));
  // refuse_overwriting_inputs knows it too, without being told.
  CHECK(error_of([&] { refuse_overwriting_inputs({{"--json", soft}}, {}); }) == "--json " + soft + refusal);
  CHECK(slurp(hf) == text);
  CHECK(d.entries() == 3);  // config.json, hard.json, soft.json: no temporary file left behind
  // Other files, standard output and devices pass.
  CHECK(error_of([&] {
          refuse_overwriting_inputs({{"--json", "-"}, {"--trace", "/dev/null"}, {"--out", d.at("new.json")}}, {});
        }) == "(no error)");
  forget_inputs_read();
  CHECK(!input_read_at(hf));
}

TEST_CASE("outputs: an input read while an output is being written is refused when it is renamed", "[output_file]") {
  TempDir d;
  forget_inputs_read();
  const std::string p = d.at("plan.yaml");
  put(p, "tp_degree: 2\n");
  OutputFile f("--out-plan", p);  // not read yet: opened
  f.stream() << "tp_degree: 4\n";
  CHECK(read_input_file(p, "plan YAML") == "tp_degree: 2\n");
  CHECK(error_of([&] { f.commit(); }) == "--out-plan " + p + ": is also the plan YAML " + p +
                                             "; refusing to overwrite an input (write to another path)");
  CHECK(slurp(p) == "tp_degree: 2\n");
  forget_inputs_read();
}

TEST_CASE("outputs: a file read and then deleted does not protect a new file given its inode", "[output_file]") {
  TempDir d;
  forget_inputs_read();
  // The registry holds device and inode; once the input is gone the number may be reused by an unrelated file.
  const std::string gone = d.at("gone.yaml");
  put(gone, "a: 1\n");
  CHECK(read_input_file(gone, "config YAML") == "a: 1\n");
  fs::remove(gone);
  for (int i = 0; i < 8; ++i) {  // new files, some of which may take the freed inode
    const std::string p = d.at("new" + std::to_string(i) + ".yaml");
    put(p, "b\n");
    CHECK(error_of([&] { write_output("--json", p, "{}"); }) == "(no error)");
  }
  // The path itself stays protected.
  CHECK(error_of([&] {
          write_output("--json", gone, "{}");
        }).starts_with("--json " + gone + ": is also the config YAML"));
  forget_inputs_read();
}

// Issue 37, class 1: two outputs on one file in one write_outputs (calibrate --separate's derived names, or any
// command's): refused before either is written.
TEST_CASE("outputs: write_outputs refuses two outputs on one file", "[output_file]") {
  TempDir d;
  CHECK(error_of([&] {
          write_outputs(
              {{"--separate", d.at("c-1.yaml"), "one"}, {"--separate", d.path.string() + "/./c-1.yaml", "two"}});
        }) ==
        "--separate " + d.path.string() + "/./c-1.yaml: is also the --separate output (write each to its own path)");
  CHECK(d.entries() == 0);
}
