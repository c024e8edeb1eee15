#include "fa/packed.hpp"

#include <stdexcept>

namespace fa {

namespace {

void require_packed(const Problem& p, std::int64_t s) {
  if (!p.packed() || s < 0 || s >= static_cast<std::int64_t>(p.seq_lens.size()))
    throw std::logic_error("sequence " + std::to_string(s) + " of a problem that is not packed or has fewer sequences");
}

}  // namespace

Problem sequence_problem(const Problem& packed, std::int64_t s) {
  require_packed(packed, s);
  Problem one = packed;
  one.seq_lens.clear();
  one.batch = 1;
  one.seq_q = one.seq_k = packed.seq_lens[static_cast<std::size_t>(s)];
  return one;
}

AttentionData sequence_inputs(const Problem& packed, const AttentionData& in, std::int64_t s) {
  const Problem one = sequence_problem(packed, s);
  const std::int64_t row0 = packed.cu_seqlens()[static_cast<std::size_t>(s)];
  AttentionData out{HostTensor(q_shape(one), in.q.dtype()), HostTensor(kv_shape(one), in.k.dtype()),
                    HostTensor(kv_shape(one), in.v.dtype()), {}};
  copy_rows(in.q, row0, out.q, 0, one.seq_q);
  copy_rows(in.k, row0, out.k, 0, one.seq_k);
  copy_rows(in.v, row0, out.v, 0, one.seq_k);
  if (in.d_o.numel() > 0) {
    out.d_o = HostTensor(q_shape(one), in.d_o.dtype());
    copy_rows(in.d_o, row0, out.d_o, 0, one.seq_q);
  }
  return out;
}

AttentionResult sequence_result(const Problem& packed, const AttentionResult& out, std::int64_t s) {
  const Problem one = sequence_problem(packed, s);
  const std::int64_t row0 = packed.cu_seqlens()[static_cast<std::size_t>(s)];
  AttentionResult r;
  r.o = HostTensor(q_shape(one), out.o.dtype());
  r.lse = HostTensor(lse_shape(one), out.lse.dtype());
  copy_rows(out.o, row0, r.o, 0, one.seq_q);
  copy_rows(out.lse, row0, r.lse, 0, one.seq_q);
  return r;
}

void place_sequence(const Problem& packed, std::int64_t s, const AttentionResult& one, AttentionResult& out) {
  const std::int64_t row0 = packed.cu_seqlens()[static_cast<std::size_t>(s)];
  const std::int64_t rows = sequence_problem(packed, s).seq_q;
  copy_rows(one.o, 0, out.o, row0, rows);
  copy_rows(one.lse, 0, out.lse, row0, rows);
}

ReferenceF64 reference_packed_f64(const Problem& packed, const AttentionData& in) {
  require_packed(packed, 0);
  const std::int64_t total = packed.total_tokens(), d = packed.dim, heads = packed.heads;
  ReferenceF64 ref{std::vector<double>(static_cast<std::size_t>(heads * total * d)),
                   std::vector<double>(static_cast<std::size_t>(heads * total))};
  const std::vector<std::int64_t> cu = packed.cu_seqlens();
  for (std::size_t s = 0; s + 1 < cu.size(); ++s) {
    const Problem one = sequence_problem(packed, static_cast<std::int64_t>(s));
    const ReferenceF64 part = reference_attention_f64(one, sequence_inputs(packed, in, static_cast<std::int64_t>(s)));
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < one.seq_q; ++i) {
        const std::size_t to = static_cast<std::size_t>(h * total + cu[s] + i), from = static_cast<std::size_t>(h * one.seq_q + i);
        ref.lse[to] = part.lse[from];
        for (std::int64_t c = 0; c < d; ++c)
          ref.o[to * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)] =
              part.o[from * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)];
      }
  }
  return ref;
}

}  // namespace fa
