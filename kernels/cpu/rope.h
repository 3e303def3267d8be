#pragma once
// Rotary position embedding (RoPE) as torchtitan / Llama apply it (CPU reference).
//
// Contract (ElementwiseOp: rope {x} -> {y}, rope_bwd {dy} -> {dx}):
//   x is (batch, seq, heads * head_dim) row-major; each head's head_dim values are head_dim/2 complex pairs of
//   ADJACENT elements (x[2i], x[2i+1]) (torch.view_as_complex on a trailing (.., hd/2, 2) view), i in [0, hd/2).
//   Token s of the local tensor sits at global position pos = offset + s: `offset` is the first global position
//   of this rank's sequence shard (0 when the sequence is not sharded).
//   Pair i of a token at pos is rotated by angle a = pos * theta^(-2i/head_dim):
//     y[2i]   = x[2i] cos a - x[2i+1] sin a
//     y[2i+1] = x[2i] sin a + x[2i+1] cos a
//   rope_bwd applies the transpose, i.e. the rotation by -a (a rotation is orthogonal).
// Angles, cos and sin are computed in double (one table of seq x head_dim/2 per call), the rotation in double,
// the result stored as float. `y` may alias `x` (in place). Llama 3 uses theta = 500000, Llama 2 10000.
// Preconditions (std::invalid_argument otherwise): head_dim even and positive, theta > 0.
// Cost (napkin): reads and writes each element once, 6 FLOPs per pair.

#include <cstdint>

namespace tptune::kernels {

// x (batch, seq, heads*head_dim) -> y (same shape), positions offset .. offset+seq-1.
void rope(const float* x, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t offset, double theta,
          float* y);

// dy (batch, seq, heads*head_dim) -> dx: the gradient of rope, a rotation by the opposite angle.
void rope_bwd(const float* dy, int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t offset,
              double theta, float* dx);

}  // namespace tptune::kernels
