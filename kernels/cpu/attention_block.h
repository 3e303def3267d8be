#pragma once
// Blockwise attention: the building block of ring attention (context parallelism). One block of query rows
// against one block of key/value rows gives a partial output and its log-sum-exp; partials of disjoint key blocks
// merge exactly into the attention over their union; the backward of a block, given the FINAL o and lse of its
// query rows, gives that block's share of dq, dk and dv, which sum over the blocks to the full gradients.
//
// kernels/cpu/attention.h is one block of it (the whole sequence, causal or full): the same layout, GQA rule and
// formulas (s_ij = scale q_i . k_j, p_ij = exp(s_ij - lse_i), D_i = rowsum(dO * O), ds_ij = p_ij (dp_ij - D_i)). This
// is what PyTorch's ring attention does with its SDPA ops (torch/distributed/tensor/experimental/
// _context_parallel/_attention.py, `_templated_ring_attention` and its backward): each ring step runs
// flash attention on (q block, kv block) with is_causal True, False or skipped, `_SDPAMerger` merges the
// (out, lse) pairs, and the backward calls the flash backward with the merged out and lse of the whole query.
//
// Layout. Every tensor is a (batch, seq, heads * head_dim) row-major tensor as in attention.h, and lse is
// (batch, n_heads, seq) fp32; a block is the rows [begin, begin + len) of every batch of such a tensor
// (`SeqRows`), so that a ring step can use one half of a load-balanced shard without copying it.
//
// Masks (`BlockMask`):
//   causal      key j of the block is visible to query i iff kv_pos + j <= q_pos + i, where q_pos and kv_pos are
//               the global positions of the blocks' first rows (the diagonal block: q_pos == kv_pos; a query row
//               that sees no key gets o = 0, lse = -inf);
//   full        every key visible (a key block entirely before the query block);
//   masked_out  no key visible: o = 0, lse = -inf, and no gradient (a key block entirely after the query block).
//
// Merge (`merge_partial`): (o, lse) <- the attention over both key sets,
//   lse = log(exp(lse_a) + exp(lse_b)),  o = exp(lse_a - lse) o_a + exp(lse_b - lse) o_b,
// written as `_SDPAMerger` writes it (the form of github.com/zhuzilin/ring-flash-attention/pull/34):
//   o = o_a - sigmoid(lse_b - lse_a) (o_a - o_b),  lse = lse_a - logsigmoid(lse_a - lse_b),
// with an empty side (lse = -inf) taking the other side unchanged, so that merging into (o = 0, lse = -inf)
// starts an accumulation.
//
// Accumulation: attention_block_fwd WRITES its output rows; attention_block_bwd ADDS into dq, dk, dv (a ring step
// adds its share into gradients that start at zero). Blocks of any lengths are accepted (the causal mask is the
// position rule above). Preconditions (std::invalid_argument otherwise): positive dims, n_heads % n_kv_heads == 0,
// rows inside their tensors.
//
// Cost: as attention.h, Eigen float matmuls over 64 query rows at a time; a causal block multiplies only the keys
// its rows can see.

#include <cstdint>

namespace tptune::kernels {

enum class BlockMask { causal, full, masked_out };

struct BlockHeads {
  int64_t batch = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
};

// Rows [begin, begin + len) of a tensor with `seq` rows per batch; `pos` is the global sequence position of row
// `begin` (only the causal mask reads it).
struct SeqRows {
  int64_t seq = 0, begin = 0, len = 0, pos = 0;
};

// Partial attention of the q rows against the kv rows: writes o rows (q's layout, n_heads) and lse rows
// (batch, n_heads, q.seq) for exactly q's rows; nothing else is touched.
void attention_block_fwd(const BlockHeads& h, BlockMask mask, SeqRows q_rows, SeqRows kv_rows, const float* q,
                         const float* k, const float* v, float* o, float* lse);

// (o, lse) rows of q_rows <- merge of themselves with (o_part, lse_part) at the same rows; all four tensors have
// q_rows.seq rows per batch and n_heads heads.
void merge_partial(const BlockHeads& h, SeqRows q_rows, float* o, float* lse, const float* o_part,
                   const float* lse_part);

// The block's share of the gradients, given the final o and lse of the q rows and d_o: adds into dq rows of
// q_rows and dk, dv rows of kv_rows. A masked_out block adds nothing.
void attention_block_bwd(const BlockHeads& h, BlockMask mask, SeqRows q_rows, SeqRows kv_rows, const float* q,
                         const float* k, const float* v, const float* o, const float* lse, const float* d_o, float* dq,
                         float* dk, float* dv);

}  // namespace tptune::kernels
