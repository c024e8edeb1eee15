// ring_layout.cpp — a rank's chunks and blocks in memory (see the header).
#include "13_ring_attention/ring_layout.hpp"

#include <stdexcept>

namespace fa::step13 {

BlockLayout block_layout(const Problem& p, const std::vector<Chunk>& chunks, std::size_t element) {
  BlockLayout layout{chunks, {}, {}, 0};
  for (const Chunk& c : chunks) {
    const std::size_t part = static_cast<std::size_t>(p.batch * p.heads * c.length * p.dim) * element;
    layout.k_at.push_back(layout.bytes);
    layout.bytes += part;
    layout.v_at.push_back(layout.bytes);
    layout.bytes += part;
  }
  return layout;
}

HostTensor take_rows(const HostTensor& whole, Chunk c) {
  const Shape4 s = whole.shape();
  if (c.begin < 0 || c.end() > s.n) throw std::logic_error("take_rows: the chunk lies outside the tensor");
  HostTensor part(Shape4{s.b, s.h, c.length, s.d}, whole.dtype());
  copy_rows(whole, c.begin, part, 0, c.length);
  return part;
}

void place_rows(HostTensor& whole, const HostTensor& part, Chunk c) {
  const Shape4 s = whole.shape();
  if (c.begin < 0 || c.end() > s.n || !(part.shape() == Shape4{s.b, s.h, c.length, s.d}) || part.dtype() != whole.dtype())
    throw std::logic_error("place_rows: the part does not fit the chunk");
  copy_rows(part, 0, whole, c.begin, c.length);
}

}  // namespace fa::step13
