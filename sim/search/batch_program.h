#pragma once
// A Program lowered once per plan structure and set to any local batch size without lowering it again.
//
// The local batch size b enters the lowering only as the leading dim of the token and activation tensors
// (tokens = b x s): every size lower() derives from it — tensor dims, a GEMM's m or k, attention's batch,
// elementwise bytes and FLOPs, embedding and loss token counts, cast elements, collective bytes — is b times
// batch-free factors plus batch-free terms (a norm's weight bytes): affine in b. Nothing else in a Program (op list,
// names, deps, dtypes, placements, chains) depends on b. So from two lowerings of one plan at batch sizes b1 != b2,
// every field is   v(b) = v(b1) + (b - b1) x (v(b2) - v(b1)) / (b2 - b1).
//
// make() checks that premise on the two Programs (everything but those sizes equal, every difference of sizes
// divisible by b2 - b1) and refuses otherwise (nullptr and the reason), so that a lowering which ever breaks it makes
// the search lower every batch size instead of predicting wrong numbers. A mixture-of-experts block rounds its
// busiest expert group's rows up (routing imbalance, float8 padding: plans/lower/experts.cc), which two lowerings
// cannot reveal: make() refuses such a Program unless those rows are exact at every batch size;
// tests/sim/batch_program_test.cc checks at(b) == lower(b) field for field over every structure and batch size of the
// example spaces.
//
//   std::string why;
//   auto bp = BatchProgram::make(model, training, plan, lower(.. b1 ..), lower(.. b2 ..), &why);
//   const Program& p = bp->at(4);   // what lower(model, training, plan at local batch 4) returns, field for field
//
// at(b) first throws what lower() would throw at b (check_local_batch(): the batch-dependent size limits), then
// rewrites the one Program it holds in place (a few hundred integer stores, no allocation): the reference stays
// valid, and changes at the next at(). One per worker thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plans/program/program.h"

namespace tptune {

// The first field in which two Programs differ ("layers op attention.wq.fwd m differs ..."), empty when they are
// equal field for field (Model and Plan by their == and names; tensors, segments, ops, chains in full). The tests'
// oracle for "the same Program as lower() gives".
std::string program_difference(Program a, const Program& b);

class BatchProgram {
 public:
  // `at_b1` and `at_b2`: lower(model, training, plan) with plan.local_batch_size = b1 and b2 (b1 != b2).
  static std::unique_ptr<BatchProgram> make(const Model& model, const Training& training, const Plan& plan,
                                            Program at_b1, const Program& at_b2, std::string* why_not = nullptr);

  const Program& at(int64_t local_batch_size);
  // Hands the Program it holds to the caller (to recycle its buffers); the BatchProgram is then unusable.
  Program release() && { return std::move(prog_); }
  // release() of the Program it was made from, `at_b1` field for field: every batch-dependent field set back to its
  // value at b1 (without the checks of at()).
  Program release_at_first() &&;
  size_t batch_dependent_fields() const { return slots_.size(); }

  BatchProgram(const BatchProgram&) = delete;  // slots_ point into prog_
  BatchProgram& operator=(const BatchProgram&) = delete;

 private:
  struct Slot {
    int64_t* field;
    int64_t at_b1;
    int64_t per_batch;
  };
  BatchProgram() = default;

  Model model_;
  Training training_;
  Plan plan_;  // the candidate's plan; local_batch_size is set per at()
  Program prog_;
  int64_t b1_ = 1;
  std::vector<Slot> slots_;
};

}  // namespace tptune
