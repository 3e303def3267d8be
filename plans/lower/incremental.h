#pragma once
// Incremental lowering: lower() (plans/lower/lower.h) cut into steps that a caller can share between plans, for the
// search's speed only. Every function here gives what lower() gives, field for field, or throws what lower() throws;
// the search (sim/search/eval.h: CandidateEvaluator, sim/search/batch_program.h) uses them to lower each plan structure
// once and derive its candidates' Programs (activation-checkpointing policies, async TP on and off, block counts,
// local batch sizes) from it, and tests/sim/batch_program_test.cc and tests/sim/search_ac_layers_test.cc check each
// step against lower(). Internal: only the search (sim/search/) and its tests include it; everything else lowers with
// lower(). Implemented in plans/lower/lower.cc, beside lower().

#include <cstdint>
#include <optional>

#include "plans/program/program.h"

namespace tptune {

// lower() in two steps, for a caller that lowers one plan under several activation-checkpointing policies (the
// search, sim/search/eval.h): the Program before the policy's recompute ops, async TP's rewrite and the
// deps, then those. The policy adds ops that copy forward ops and no tensors, so the first step is the same for every
// policy:   lower(m, t, plan) == finish_lowering(lower_unfinished(m, t, plan), plan.activation_checkpointing)
// field for field, whatever plan.activation_checkpointing lower_unfinished() was given. finish_lowering() throws
// what lower() throws after the lowering proper (async TP without sequence-parallel collectives).
struct UnfinishedProgram {
  Program prog;
  // Set by prepare_async_tp(): `prog` has async TP's rewrite of the segments before the block backward done (it is
  // the same for every policy), `forward` is the block forward before that rewrite (what recompute ops copy), and
  // `rewrote` says whether it rewrote anything.
  std::optional<Segment> forward;
  bool rewrote = false;
  // Set by prepare_async_tp(): the deps of the segments that finishing does not change are computed (every segment
  // but the block backward, and without async TP the ones after it), and finishing keeps them.
  bool deps_prepared = false;
  // Names this Program as it is now: set anew (never to a value used before) by every function here that makes or
  // changes it (lower_unfinished(), prepare_async_tp() when it changes it, unfinished_with_async_tp()). A caller that
  // finishes it into a Program remembers it, to tell finish_lowering_into() that Program's origin.
  uint64_t id = 0;
};
// `recycled`: any earlier Program (or none), whose buffers (names, shapes, op lists, deque blocks) the lowering
// reuses instead of allocating them anew: the search lowers into the Programs it has evaluated. The result is the
// same field for field whatever it holds.
// `names` false: the same Program but for its names, which are empty (TensorDesc::name and param, Op::module and
// name; also after finish_lowering() and async TP's rewrite, which derive names from these). Names are for people
// and the runtime: no size, op, dependency or placement of the Program depends on them, so a simulation of the
// nameless Program gives the same numbers. For the search, which never shows a candidate's ops (explain, tp-run and
// lower() keep them). An error may name less than lower()'s would: lower again with names to report it.
UnfinishedProgram lower_unfinished(const Model& model, const Training& training, const Plan& plan,
                                   Program recycled = {}, bool names = true);
Program finish_lowering(UnfinishedProgram p, ActivationCheckpointing ac);
// Does once, for a caller that finishes `u` under several policies, the part of finish_lowering() that does not
// depend on the policy: the deps of the segments finishing does not change, and async TP's rewrite of embed.fwd,
// block.fwd and head (each segment's rewrite reads only its
// own ops and appends tensors, and the policy's recompute ops go into block.bwd, after them in the Program: the
// rewrite of [0, 3) then of [3, n) with the recompute ops in is the rewrite of them all, tensor ids included). No-op
// when done. finish_lowering(u, ac) gives the same Program after it as before.
void prepare_async_tp(UnfinishedProgram& u);
// lower_unfinished(model, training, plan) from `sibling`, the unfinished Program of a plan that differs from `plan`
// only in async_tp (and activation checkpointing, which finish_lowering() sets): the lowering proper never reads
// async_tp (async TP is a rewrite in finish_lowering(); lower_unfinished() reads it only in its checks), so the two
// Programs are equal but for their plan fields. Runs lower_unfinished()'s checks of `plan` (throwing what it
// throws), then sets the plan fields; a `sibling` of another plan, model or training is lowered anew instead. The
// search lowers each sequence-parallel structure once for async TP off and on.
UnfinishedProgram unfinished_with_async_tp(UnfinishedProgram sibling, const Model& model, const Training& training,
                                           const Plan& plan);
// finish_lowering(p, ac) into `out`, which may hold any earlier Program: the result is the same field for field, but
// `out`'s buffers (op and tensor names, shapes, op lists, deque blocks) are reused by copy-assignment instead of
// allocated anew. For the search, which finishes one unfinished Program under several policies and recycles the
// Programs it has evaluated: a fresh copy and its destruction cost about as much as finishing itself.
// `ac_layers`: the plan's Plan::ac_layers to finish with (-1: the one `p` was lowered with).
// `out_from`: p.id when `out` is what finish_lowering_into(p, any policy, out, any ac_layers) left, unchanged since (0:
// unknown). Then `out` already holds what finishing does not change (p's tensors, the segments before the block
// backward, the model, plan and training but for the policy), and only the rest is copied from `p`.
void finish_lowering_into(const UnfinishedProgram& p, ActivationCheckpointing ac, Program& out, int64_t ac_layers = -1,
                          uint64_t out_from = 0);

// A Program whose block backward is split (finished with 0 < ac_layers < n_layers, so that it has recompute ops) at
// another block count 0 < k < n_layers: the two segments' layer ranges and plan.ac_layers are all that finishing at
// k changes (the segments' ops are the same for every k), so the result equals finishing at k field for field. For
// the search's ac_layers sweep (CandidateEvaluator::sweep_ac_layers, sim/search/eval.h). Throws tptune::Error when `p`
// is not split or k is out of range.
void set_ac_layers(Program& p, int64_t k);
// Whether `p`'s block backward is two segments (finished with 0 < ac_layers < n_layers and recompute ops).
bool has_split_backward(const Program& p);

// The checks of lower() that depend on the plan's local batch size, in lower()'s order and with its messages:
// >= 1, within limits::local_batch_size, and the largest tensor and FLOP counts within limits. When lower() of a plan
// succeeds at one batch size, this throws exactly what lower() of the same plan at another batch size would throw
// (the search's batch-parametric Program, sim/search/batch_program.h, relies on it).
void check_local_batch(const Model& model, const Training& training, const Plan& plan);

}  // namespace tptune
