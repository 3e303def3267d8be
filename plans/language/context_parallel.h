#pragma once
// Context parallelism (CP): the sequence of every sequence is sharded over cp ranks, and attention runs as a ring
// that passes key/value shards between them. What tptune models, as read in the sources:
//
// The mesh (torchtitan/distributed/parallel_dims.py, pytorch/torchtitan b5bcd76): [pp, dp_replicate, dp_shard, cp,
// tp], row-major, tp innermost. FSDP shards parameters over the flattened dp_shard x cp mesh ("fsdp" = dp_shard * cp,
// partial_dtensor; spmd_types keeps the four axes for storage, the same ranks); the batch is split over dp_replicate x
// dp_shard only, so a cp group of ranks trains one local batch: global batch = local x dp_shard x dp_replicate x ga.
// A cp group is cp ranks with stride tp; it sits inside a node when cp x tp <= gpus_per_node.
//
// Input sharding (torchtitan/distributed/context_parallel/api.py cp_shard, torch's _context_parallel_shard with the
// default _HeadTailLoadBalancer): inputs, labels and the rope positions are cut along the sequence into 2 x cp chunks
// and rank r holds chunks r and 2cp-1-r (head and tail), so each rank holds seq/cp tokens and every token-wise op,
// activation and the loss shrink by cp. torchtitan's trainer refuses a sequence not divisible by (tp with sequence
// parallel, else 1) x 2cp ("The number of tokens per pipeline microbatch ... must be divisible by ..."). Without load
// balancing (context_parallel_load_balancer None) rank r holds the r-th contiguous seq/cp tokens: seq % cp == 0.
// The loss is the local sum over the rank's tokens divided by the global token count (trainer.py,
// global_valid_tokens), so gradients summed by FSDP's reduce-scatter over dp_shard x cp are the full gradient.
//
// Ring attention (torch/distributed/tensor/experimental/_attention.py, _templated_ring_attention and its backward;
// _ContextParallelOptions: enable_load_balance True, rotate_method ALL_GATHER by default). Forward, on cp rank r,
// for i in 0 .. cp-1: at i > 0 wait for the K/V buffer of step i; at i < cp-1 torch.cat(K, V) and hand it to the
// rotater (asynchronous functional collective); then one SDPA with the lse merged by _SDPAMerger (fp32):
//   i == 0              local q x local k/v, causal (the diagonal block)
//   i > 0, load balance i <= r: full q x the first half of the received k/v (its head chunk), not causal;
//                       i >  r: the second half of q (the tail chunk) x the whole received k/v, not causal, merged into
//                       the tail half only. Either way half a (seq/cp)^2 block.
//   i > 0, no balancing i <= r: full block, not causal; i > r: skipped (the rank with r = cp-1 does cp-1 full blocks)
// So with load balancing every rank computes 2 b h (s/cp)^2 d (diagonal, causal) + (cp-1) x 4 b h (s/cp)(s/2cp) d
// = cp x 2 b h (s/cp)^2 d = 2 b h s^2 d / cp: the causal total / cp.
// Rotaters: allgather (_AllGatherRotater) all-gathers the cat(K, V) buffer once, issued before step 0's SDPA and
// waited for at step 1 (it overlaps the diagonal block only); alltoall (_AllToAllRotater, ft_c.permute_tensor) sends
// the current buffer to rank r+1 and receives rank r-1's: cp-1 transfers, step i+1's in flight during step i's SDPA.
// Backward (_templated_ring_attention_backward): the same K/V rotation again (K/V are not kept gathered), the same
// blocks' SDPA backward, and the dK/dV accumulators travel the ring through a second rotater that is always
// all-to-all (dkv_rotater, method ALL_TO_ALL) in fp32 (convert_to_f32): cp transfers of 2 x kv elements x 4 bytes,
// the last one returning each shard's gradient home after the loop. There is no reduce-scatter of dK/dV.
//
// Which torchtitan exposes what: torchtitan before 0.3 (the December 2024 benchmark, TOML job configs) has
// parallelism.context_parallel_degree and context_parallel_rotate_method ("allgather" default | "alltoall"); torchtitan
// 0.3 (b5bcd76) has context_parallel_degree and context_parallel_load_balancer ("headtail" default | None), its rotate
// method being torch's default, allgather (the rotate key was removed in pytorch/torchtitan 8e55544).

#include <cstdint>
#include <string>
#include <string_view>

namespace tptune {

enum class CpRotate { allgather, alltoall };
std::string_view to_string(CpRotate r);
// "allgather" | "alltoall"; tptune::Error "<where>: expected one of allgather, alltoall, got '<s>'" otherwise.
CpRotate parse_cp_rotate(std::string_view s, const std::string& where);

// The sequence-length rule of torchtitan's trainer for a cp degree: seq_len % (2 x cp) == 0 with load balancing,
// seq_len % cp == 0 without. Throws tptune::Error "<where>: seq_len N is not divisible by 2 x cp_degree = M (...)".
void check_cp_seq_len(int64_t seq_len, int cp_degree, bool load_balance, const std::string& where);

// The query blocks one cp rank computes in the forward ring, as (query tokens, key tokens, causal) per step, for the
// rank whose work is largest (with load balancing every rank does the same; without, rank cp-1 does the most and
// sets the step time). `local` = seq_len / cp tokens.
struct CpRingStep {
  int64_t q = 0, kv = 0;
  bool causal = false;
};
CpRingStep cp_ring_step(int step, int64_t local, bool load_balance);

}  // namespace tptune
