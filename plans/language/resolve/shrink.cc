#include "plans/language/resolve/shrink.h"

#include <fmt/format.h>

#include <algorithm>

#include "plans/util/error.h"

namespace tptune {

namespace {

// The smallest multiple of `tp` that is >= v when `divisible`, else that multiple + 1 (never divisible by tp > 1).
int64_t like(int64_t v, int64_t tp, bool divisible) {
  const int64_t up = ((v + tp - 1) / tp) * tp;
  return divisible || tp == 1 ? up : up + 1;
}

}  // namespace

Shrunk shrink_for_verify(const Model& m, const Training& t, const Plan& plan) {
  const int64_t tp = plan.tp_degree;
  if (tp < 1) throw Error(fmt::format("--shrink: tp {}: expected a positive TP degree", tp));
  if (m.n_heads <= 0 || m.n_kv_heads <= 0 || m.n_heads % m.n_kv_heads != 0)
    throw Error(fmt::format("--shrink: model {}: n_heads {} is not a multiple of n_kv_heads {}", m.name, m.n_heads,
                            m.n_kv_heads));
  Shrunk s{m, t, {}};
  Model& o = s.model;
  auto note = [&](const char* what, int64_t before, int64_t after) {
    if (before != after) s.changes.push_back(fmt::format("{} {} -> {}", what, before, after));
  };
  auto keep_smaller = [](int64_t before, int64_t proposed) { return std::min(before, proposed); };

  o.n_layers = keep_smaller(m.n_layers, 2);
  const int64_t group = m.n_heads / m.n_kv_heads;
  o.n_kv_heads = m.n_kv_heads % tp == 0 ? tp : m.n_kv_heads;
  o.n_heads = o.n_kv_heads * group;
  // head_dim: 8, or the next even size that gives dim' the real dim's divisibility by tp (colwise embeddings shard
  // dim); n_heads' x 8 already has it whenever the heads shard. The real head_dim when nothing smaller does.
  // A model with its own head_dim (n_heads x head_dim != dim) keeps one: head_dim' 8 (or the real one when smaller)
  // and dim' the next size above n_heads' x 8 with the real dim's divisibility by tp, so that the q/k/v/o shapes still
  // differ from (dim, dim). q/k/v biases (qkv_bias) are kept as they are.
  int64_t head_dim = m.head_dim();
  if (m.explicit_head_dim > 0) {
    head_dim = std::min<int64_t>(8, m.head_dim());
    o.explicit_head_dim = head_dim;
    o.dim = like(o.n_heads * head_dim + 1, tp, m.dim % tp == 0);
  } else {
    for (int64_t hd = std::min<int64_t>(8, m.head_dim()); hd < m.head_dim(); hd += 2)
      if ((m.dim % tp == 0) == (o.n_heads * hd % tp == 0)) {
        head_dim = hd;
        break;
      }
    o.dim = o.n_heads * head_dim;
  }
  o.ffn_dim = keep_smaller(m.ffn_dim, like(o.dim * 3 / 2, tp, m.ffn_dim % tp == 0));
  o.vocab_size = keep_smaller(m.vocab_size, like(40 * tp, tp, m.vocab_size % tp == 0));
  // Context parallelism: 2 rows per sequence chunk of each (cp, tp) rank (2 x cp chunks under load balancing).
  const int64_t cp_unit = plan.cp_degree > 1 ? tp * plan.cp_degree * (plan.cp_load_balance ? 2 : 1) : 0;
  s.training.seq_len = cp_unit > 0 && t.seq_len % cp_unit == 0
                           ? keep_smaller(t.seq_len, 2 * cp_unit)
                           : keep_smaller(t.seq_len, like(4 * tp, tp, t.seq_len % tp == 0));
  if (o.ffn_dim == o.dim && m.ffn_dim != m.dim) o.ffn_dim += tp;  // keep the two apart (still a multiple of tp)
  if (o.vocab_size == o.dim && m.vocab_size != m.dim) o.vocab_size += tp;

  note("n_layers", m.n_layers, o.n_layers);
  note("n_kv_heads", m.n_kv_heads, o.n_kv_heads);
  note("n_heads", m.n_heads, o.n_heads);
  note("head_dim", m.head_dim(), o.head_dim());
  note("dim", m.dim, o.dim);
  note("ffn_dim", m.ffn_dim, o.ffn_dim);
  note("vocab_size", m.vocab_size, o.vocab_size);
  note("seq_len", t.seq_len, s.training.seq_len);
  o.name = m.name + " (shrunk)";
  return s;
}

}  // namespace tptune
