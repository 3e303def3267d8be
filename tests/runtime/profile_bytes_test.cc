// The bytes a profile's memory-bound op records name (runtime/profiler.cc: moved_bytes), derived by hand for
// tiny-llama at tp 1 (examples/tiny-llama.yaml: fp32, 2 x 32 = 64 tokens, dim 64, vocab 256; ids and targets int32).
#include <catch2/catch.hpp>

#include "runtime/cpu/cpu_backend.h"
#include "runtime/profiler.h"
#include "tests/fixtures.h"

using namespace tptune;

TEST_CASE("profile records of embedding and cross-entropy ops name the bytes they move", "[runtime][profile]") {
  CpuBackend be;
  const Program p = test::lower_example("tiny-llama.yaml", "sequence_parallel", {.tp_degree = 1});
  ProfileOptions o;
  o.warmup = 0, o.iters = 1;
  const auto j = profile_json(profile_program(p, be, o));
  int seen = 0;
  for (const auto& op : j["ops"]) {
    const std::string kind = op["kind"];
    if (kind == "embedding") {
      ++seen;
      // forward: ids 64 x 4 = 256 B, the 64 gathered rows 64 x 64 x 4 = 16384 B read, out 16384 B written: 33024.
      // backward: ids 256 + d_out 16384 read, the whole d_weight 256 x 64 x 4 = 65536 written: 82176.
      CHECK(op["op"]["bytes"] == (op["op"]["backward"] == true ? 82176 : 33024));
    } else if (kind == "cross_entropy") {
      const std::string stage = op["op"]["stage"];
      // logits 64 x 256 x 4 = 65536 B; per-token statistics and targets 64 x 4 = 256 B each.
      if (stage == "row_max") {  // logits -> max
        ++seen;
        CHECK(op["op"]["bytes"] == 65536 + 256);
      } else if (stage == "backward") {  // logits, max, sumexp, targets -> d_logits
        ++seen;
        CHECK(op["op"]["bytes"] == 65536 + 3 * 256 + 65536);
      }
    } else if (kind == "elementwise" || kind == "collective") {
      CHECK(op["op"].contains("bytes"));  // their own byte counts, as before
    }
  }
  CHECK(seen == 4);
}
