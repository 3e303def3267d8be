// Context parallelism in the exports: torchtitan 0.3's flags (context_parallel_degree, context_parallel_load_balancer;
// no rotate-method key, so alltoall is refused) and the job-config TOML of torchtitan before 0.3
// (context_parallel_degree, context_parallel_rotate_method), read back into the plan's toggles; plans without CP carry
// no cp key.
#include <catch2/catch.hpp>
#include <map>
#include <sstream>

#include "plans/export/export.h"
#include "plans/language/plan.h"
#include "plans/util/error.h"
#include "tests/error_text.h"
#include "tests/fixtures.h"

using namespace tptune;
using Catch::Matchers::Contains;
using tptune::test::error_of;
using tptune::test::make_plan;

namespace {

// "section.key" -> value of the TOML's `key = value` lines (comments and blank lines skipped).
std::map<std::string, std::string> toml_keys(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) kv[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return kv;
}

// The value after `flag` in the torchtitan.train command line ("" when the flag is absent).
std::string flag_value(const std::string& sh, const std::string& flag) {
  const size_t at = sh.find(flag + " ");
  if (at == std::string::npos) return "";
  const size_t from = at + flag.size() + 1;
  return sh.substr(from, sh.find_first_of(" \n", from) - from);
}

ExportContext llama3_8b_on(int nodes, int gpus) {
  ExportContext ctx;
  ctx.model = test::llama3_8b();
  ctx.seq_len = 65536;
  ctx.nodes = nodes;
  ctx.gpus_per_node = gpus;
  return ctx;
}

}  // namespace

TEST_CASE("context parallel TOML round trip: the degree and the rotate method", "[cp][export]") {
  for (int cp : {1, 2, 4, 8})
    for (auto rotate : {CpRotate::allgather, CpRotate::alltoall}) {
      const Plan p =
          make_plan("sequence_parallel",
                    {.tp_degree = 1, .dp_shard = 8 / cp, .loss_parallel = true, .cp_degree = cp, .cp_rotate = rotate});
      INFO("cp " << cp << " " << to_string(rotate));
      const auto kv = toml_keys(export_torchtitan_toml(p));
      CHECK(kv.at("parallelism.data_parallel_shard_degree") == std::to_string(8 / cp));
      if (cp == 1) {
        CHECK(kv.count("parallelism.context_parallel_degree") == 0);
        CHECK(kv.count("parallelism.context_parallel_rotate_method") == 0);
        continue;
      }
      // Read back into a plan: the same toggles.
      Plan back = p;
      back.cp_degree = std::stoi(kv.at("parallelism.context_parallel_degree"));
      const std::string method = kv.at("parallelism.context_parallel_rotate_method");
      back.cp_rotate = parse_cp_rotate(method.substr(1, method.size() - 2), "toml");
      CHECK(back.toggles() == p.toggles());
    }
  // The head-tail balancer off cannot be written in TOML (its key takes None).
  const Plan off = make_plan("sequence_parallel", {.dp_shard = 4, .cp_degree = 2, .cp_load_balance = false});
  CHECK_THAT(error_of([&] { export_torchtitan_toml(off); }), Contains("cp_load_balance false"));
}

TEST_CASE("context parallel torchtitan 0.3 flags: degree, load balancer, world", "[cp][export]") {
  Plan base;
  base.framework = Framework::torchtitan_0_3;
  base.tp_degree = 1;
  base.dp_shard = 2;
  base.cp_degree = 4;
  base.activation_checkpointing = ActivationCheckpointing::full;
  const ExportContext ctx = llama3_8b_on(1, 8);
  const std::string sh = export_torchtitan_cli(preset_plan("sequence_parallel", base), ctx);
  CHECK(flag_value(sh, "--parallelism.context-parallel-degree") == "4");
  CHECK(flag_value(sh, "--parallelism.context-parallel-load-balancer") == "headtail");
  CHECK(flag_value(sh, "--parallelism.data-parallel-shard-degree") == "2");
  CHECK(flag_value(sh, "--training.seq-len") == "65536");
  CHECK_THAT(sh, !Contains("rotate"));
  // Read back: the flags give the plan's toggles again.
  Plan back = preset_plan("sequence_parallel", base);
  back.cp_degree = std::stoi(flag_value(sh, "--parallelism.context-parallel-degree"));
  back.cp_load_balance = flag_value(sh, "--parallelism.context-parallel-load-balancer") != "None";
  CHECK(back.toggles() == preset_plan("sequence_parallel", base).toggles());
  base.cp_load_balance = false;
  CHECK(flag_value(export_torchtitan_cli(preset_plan("sequence_parallel", base), ctx),
                   "--parallelism.context-parallel-load-balancer") == "None");
  // Without CP: no cp flag at all.
  Plan no_cp = base;
  no_cp.cp_degree = 1;
  no_cp.dp_shard = 8;
  CHECK_THAT(export_torchtitan_cli(preset_plan("sequence_parallel", no_cp), ctx), !Contains("context-parallel"));
  // tp x dp_shard x cp must be the cluster's world.
  base.dp_shard = 1;
  CHECK_THAT(error_of([&] { export_torchtitan_cli(preset_plan("sequence_parallel", base), ctx); }),
             Contains("tp 1 x dp_shard 1 x dp_replicate 1 x cp 4 = 4 GPUs, the config's cluster has 1 nodes x 8 = 8"));
  // torchtitan 0.3 has no rotate-method key: alltoall is refused, naming the TOML format that has it.
  base.dp_shard = 2;
  base.cp_rotate = CpRotate::alltoall;
  CHECK_THAT(error_of([&] { export_torchtitan_cli(preset_plan("sequence_parallel", base), ctx); }),
             Contains("cp_rotate_method alltoall: torchtitan 0.3 has no rotate-method key"));
}
