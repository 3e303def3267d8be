#pragma once
// Where the rows of a sequence live under context parallelism (CP), and how a full (batch, seq, width) tensor is cut
// into the cp ranks' shards and put back together.
//
// Two layouts, as PyTorch's context parallelism lays out the sequence dimension:
//   contiguous  rank r holds rows [r * s/cp, (r+1) * s/cp)  (torch.chunk of the sequence; no load balancing);
//   head_tail   the sequence in 2 * cp equal chunks, rank r holds chunk r followed by chunk 2cp-1-r, so that every
//               rank has the same amount of causal attention work (torch's `_HeadTailLoadBalancer`,
//               torch/distributed/tensor/experimental/_context_parallel/_load_balancer.py, the default of
//               torchtitan's `cp_shard` in torchtitan/distributed/context_parallel/api.py, load_balancer_type
//               "headtail"; `_ContextParallelOptions.enable_load_balance` defaults to True).
// cp_positions() is the global sequence position of each local row, which is also the rope position of that row.
//
// Errors: a sequence that does not divide (s % cp, or s % (2 cp) under head_tail) or a rank outside [0, cp) is a
// tptune::Error naming the numbers.

#include <cstdint>
#include <string_view>
#include <vector>

namespace tptune {

enum class SeqLayout { contiguous, head_tail };

std::string_view seq_layout_name(SeqLayout layout);

// Rows per rank: seq / cp, after checking that the layout can cut `seq` for `cp` ranks.
int64_t cp_local_seq(int64_t seq, int cp, SeqLayout layout);

// Global position of each of rank's cp_local_seq() rows, in local row order.
std::vector<int64_t> cp_positions(int64_t seq, int cp, int rank, SeqLayout layout);

// Rank's shard (batch, seq / cp, width) of a full (batch, seq, width) tensor.
std::vector<float> cp_shard(const std::vector<float>& full, int64_t batch, int64_t seq, int64_t width, int cp, int rank,
                            SeqLayout layout);

// Writes rank's shard (batch, seq / cp, width) into its rows of the full (batch, seq, width) tensor; the shards of
// all ranks together write every row once.
void cp_unshard(const std::vector<float>& local, int64_t batch, int64_t seq, int64_t width, int cp, int rank,
                SeqLayout layout, std::vector<float>& full);

}  // namespace tptune
