// tp-run end to end at tp 1 (a single process, no mpirun): the Profile JSON has one record per op of the expanded
// Program, in order, with its IR descriptor; verify's JSON report says what it checked. The hidden test
// "[.profile-file]" checks a profile written by `mpirun -np 2 tp-run profile` (tests/integration registers it).
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "tests/fixtures.h"

using namespace tptune;

namespace {
const std::string kSource = TPTUNE_SOURCE_DIR, kBinary = TPTUNE_BINARY_DIR;
const std::string kTpRun = kBinary + "/tools/tp-run";

// Runs tp-run with `args`, its output in `log` (a file of the calling test's own: test cases run in parallel); a
// non-zero exit puts that output in the test's report, so a failure under load says why.
int run(const std::string& args, const std::string& log) {
  const int rc = std::system((kTpRun + " " + args + " > " + log + " 2>&1").c_str());
  if (rc != 0) {
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    UNSCOPED_INFO("tp-run " << args << " exited " << rc << ":\n" << output);
  }
  return rc;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

void check_one_to_one(const nlohmann::json& prof, const Program& p) {
  FlatProgram flat = expand(p);
  const auto& ops = prof.at("ops");
  REQUIRE(ops.size() == flat.ops.size());
  for (size_t i = 0; i < flat.ops.size(); ++i) {
    const FlatOp& f = flat.ops[i];
    INFO("op " << i << " " << f.name);
    CHECK(ops[i]["name"] == f.name);
    CHECK(ops[i]["module"] == f.module);
    CHECK(ops[i]["layer"] == f.layer);
    CHECK(ops[i]["phase"] == std::string(to_string(f.op->phase)));
    CHECK(ops[i]["kind"] == std::string(kind_name(f.op->kind)));
    REQUIRE(ops[i]["inputs"].size() == f.inputs.size());
    for (size_t k = 0; k < f.inputs.size(); ++k) {
      const TensorDesc& d = p.tensor(flat.tensors[size_t(f.inputs[k])].template_id);
      CHECK(ops[i]["inputs"][k]["shape"].get<Shape>() == d.local_shape);
      CHECK(ops[i]["inputs"][k]["dtype"] == std::string(to_string(d.dtype)));
    }
    if (const auto* g = std::get_if<GemmOp>(&f.op->kind)) {
      CHECK(ops[i]["op"]["m"] == g->m);
      CHECK(ops[i]["op"]["n"] == g->n);
      CHECK(ops[i]["op"]["k"] == g->k);
    }
    if (const auto* c = std::get_if<CollectiveOp>(&f.op->kind)) CHECK(ops[i]["op"]["bytes"] == c->bytes);
    CHECK(ops[i]["time_us"]["median"].get<double>() >= 0.0);
  }
}
}  // namespace

TEST_CASE("tp-run profile at tp 1 writes one record per op of the Program", "[runtime][tp-run]") {
  const std::string out = kBinary + "/tests/tp-run-profile-tp1.json";
  std::remove(out.c_str());
  REQUIRE(run("profile " + kSource + "/examples/tiny-gpt.yaml --preset vanilla --warmup 0 --iters 2 --out " + out,
              out + ".log") == 0);
  nlohmann::json prof = read_json(out);
  CHECK(prof["format"] == "tptune-profile");
  CHECK(prof["version"] == 1);
  CHECK(prof["environment"]["backend"] == "cpu");
  CHECK(prof["environment"]["threads_per_rank"] == 1);
  CHECK(prof["environment"]["libraries"].contains("eigen"));
  CHECK(prof["environment"]["git_hash"].get<std::string>().size() > 0);
  CHECK(prof["timing"]["iters"] == 2);
  check_one_to_one(prof, test::lower_example("tiny-gpt.yaml", "vanilla", {.tp_degree = 1}));
  // The optimizer runs in a profile.
  bool adamw = false;
  for (const auto& op : prof["ops"]) adamw |= op["phase"] == "optimizer" && op["op"]["fn"] == "adamw";
  CHECK(adamw);
}

TEST_CASE("tp-run verify --json at tp 1 reports every parameter", "[runtime][tp-run]") {
  const std::string out = kBinary + "/tests/tp-run-verify-tp1.json";
  std::remove(out.c_str());
  REQUIRE(run("verify " + kSource + "/examples/tiny-llama.yaml --preset vanilla --seed 4 --json " + out,
              out + ".log") == 0);
  nlohmann::json r = read_json(out);
  CHECK(r["pass"] == true);
  CHECK(r["tp"] == 1);
  CHECK(r["seed"] == 4);
  CHECK(r["params"].size() == 21);
  CHECK(r["params"][0]["name"] == "tok_embeddings.weight");  // model order
  CHECK(r["failed"].empty());
}

TEST_CASE("tp-run reports a bad config in one line and exits 2", "[runtime][tp-run]") {
  const std::string bad = kBinary + "/tests/tp-run-bad-config.yaml";
  std::ofstream(bad) << "model:\n  dim: sixty-four\n";
  CHECK(WEXITSTATUS(run("verify " + bad + " --preset vanilla", bad + ".log")) == 2);
}

TEST_CASE("a profile written under mpirun -np 2 matches its Program", "[.profile-file]") {
  const char* path = std::getenv("TPTUNE_PROFILE_FILE");
  REQUIRE(path != nullptr);
  nlohmann::json prof = read_json(path);
  CHECK(prof["environment"]["ranks"] == 2);
  check_one_to_one(prof, test::lower_example("tiny-llama.yaml", "sequence_parallel",
                                             {.tp_degree = 2, .async_tp = true, .loss_parallel = true}));
}
