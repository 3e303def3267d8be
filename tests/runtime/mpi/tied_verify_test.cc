// Tied embeddings on MPI_COMM_WORLD (mpirun -np 2 and 4): the tied tiny Llama verifies sharded == unsharded (the
// reference is the same model at tp 1, tied too) with the shared weight gathered and compared once, and a Program
// whose head gradient is not added to the embedding's fails naming tok_embeddings.weight.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <string>

#include "plans/language/config.h"
#include "plans/language/plan.h"
#include "plans/lower/lower.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/executor.h"
#include "runtime/verifier.h"

using namespace tptune;

namespace {

struct TiedPrograms {
  Program sharded, reference;
};

TiedPrograms tied_tiny_llama() {
  Config cfg = load_config(std::string(TPTUNE_SOURCE_DIR) + "/examples/tiny-llama.yaml");
  cfg.model.tie_word_embeddings = true;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  Plan base;
  base.tp_degree = n;
  base.local_batch_size = cfg.training.local_batch_size;
  base.loss_parallel = true;
  const Plan plan = preset_plan("sequence_parallel", base);
  Plan ref = plan;
  ref.tp_degree = 1;
  return {lower(cfg.model, cfg.training, plan), lower(cfg.model, cfg.training, ref)};
}

int count_named(const VerifyReport& r, const std::string& name) {
  int n = 0;
  for (const auto& c : r.params) n += c.name == name;
  return n;
}

}  // namespace

TEST_CASE("tied embeddings verify: one gradient, sharded == unsharded", "[mpi][verify][tied]") {
  auto p = tied_tiny_llama();
  CpuBackend be(MPI_COMM_WORLD), local;
  VerifyReport r = verify_step(p.sharded, p.reference, be, local, 5);
  for (const auto& c : r.params) INFO(c.name << ": " << c.problem);
  CHECK(r.pass());
  // tiny-llama's untied parameters: tok_embeddings, 2 x 9 per block (4 attention, 3 MLP, 2 norms), norm, output = 21
  // (verifier_test.cc); tied, output.weight is tok_embeddings.weight: 20, the shared one compared once.
  CHECK(r.params.size() == 20);
  CHECK(count_named(r, "tok_embeddings.weight") == 1);
  CHECK(count_named(r, "output.weight") == 0);
}

TEST_CASE("a tied Program whose head gradient is not added to the embedding's fails, naming the weight",
          "[mpi][verify][tied]") {
  auto p = tied_tiny_llama();
  // Turn the tied add around: the head's gradient receives the embedding's (y += a with a and y swapped), so the
  // parameter's gradient is the embedding's alone, as if the lowering had forgotten the output projection's use.
  int planted = 0;
  for (Segment& s : p.sharded.segments)
    for (Op& op : s.ops)
      if (op.name == "tok_embeddings.weight.grad_tied_add") {
        std::swap(op.inputs[0], op.inputs[1]);
        op.outputs = {op.inputs[1]};
        ++planted;
      }
  REQUIRE(planted == 1);
  CpuBackend be(MPI_COMM_WORLD), local;
  VerifyReport r = verify_step(p.sharded, p.reference, be, local, 1);
  CHECK(!r.pass());
  const auto failed = r.failed_params();
  CHECK(failed == std::vector<std::string>{"tok_embeddings.weight"});
  CHECK(format_report(r).find("verify: FAIL") != std::string::npos);
}
