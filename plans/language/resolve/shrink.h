#pragma once
// A scaled-down model of the same architecture, for proving a searched plan correct on CPU ranks in seconds
// (`tp-run verify CONFIG --plan best.yaml --shrink`).
//
// What stays: the plan (TP degree, module styles, float8, async TP, loss parallel, activation checkpointing, local
// batch), the MLP and norm kinds, q/k/v biases (qkv_bias), and the head grouping (n_heads / n_kv_heads). What shrinks,
// each chosen so that every divisibility by the TP degree `tp` that holds for the real model still holds (and one that
// fails still fails, so that the shrunk model is refused exactly when the real one is):
//
//   n_layers    -> 2                                  (two blocks: the layer chain and its gradient are exercised)
//   n_kv_heads  -> tp when tp divides it, else unchanged (the smallest count colwise wk/wv can shard)
//   n_heads     -> n_kv_heads' x (n_heads / n_kv_heads) (same grouping)
//   head_dim    -> 8 (even, for rope; the real one when smaller), or the next even size that keeps dim's
//                  divisibility by tp; dim -> n_heads' x head_dim'. A model with its own head_dim (n_heads x
//                  head_dim != dim, Mistral Nemo) keeps one: head_dim' 8 (or the real one when smaller), dim' the
//                  first size above n_heads' x head_dim' with dim's divisibility by tp
//   ffn_dim     -> 3/2 x dim', rounded up to a multiple of tp when tp divides ffn_dim (else to tp's multiple + 1)
//   vocab_size  -> 40 x tp when tp divides it, else 40 x tp + 1
//   seq_len     -> 4 x tp when tp divides it, else 4 x tp + 1; with context parallelism 2 x tp x cp (x 2 under
//                  load balancing: two rows per sequence chunk of each rank)
// Dims that end up no smaller are left as they are. Dims stay pairwise different where the real ones are, so that
// a transposed shape cannot pass by accident (dim' != ffn' != vocab').

#include <string>
#include <vector>

#include "plans/language/config.h"
#include "plans/language/plan.h"

namespace tptune {

struct Shrunk {
  Model model;
  Training training;
  std::vector<std::string> changes;  // "dim 8192 -> 512", one per dim that shrank, in the order above
};

// The scaled-down model and training shape for `plan` (tp = plan.tp_degree). Throws tptune::Error for tp < 1.
Shrunk shrink_for_verify(const Model& m, const Training& t, const Plan& plan);

}  // namespace tptune
