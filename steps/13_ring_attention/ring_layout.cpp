// ring_layout.cpp — a rank's chunks and blocks in memory (see the header).
#include "13_ring_attention/ring_layout.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "fa/parallel.hpp"

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

namespace {

// The rows of chunk c of every head, between the whole [B,H,N,W] tensor of shape s and the part
// [B,H,c.length,W] (into_whole: part to whole), on every core: at a million tokens a chunk is
// gigabytes, copied for every run's inputs and outputs.
void copy_chunk_rows(std::byte* to, const std::byte* from, const Shape4& s, Chunk c, std::size_t element,
                     bool into_whole) {
  const std::size_t row_bytes = static_cast<std::size_t>(s.d) * element;
  parallel_ranges(
      s.b * s.h * c.length,
      [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t r = begin; r < end;) {  // r: row of the part; a range may span heads
          const std::int64_t head = r / c.length, i = r % c.length, n = std::min(end - r, c.length - i);
          const std::size_t at_part = static_cast<std::size_t>(r) * row_bytes,
                            at_whole = static_cast<std::size_t>(head * s.n + c.begin + i) * row_bytes;
          std::memcpy(to + (into_whole ? at_whole : at_part), from + (into_whole ? at_part : at_whole), n * row_bytes);
          r += n;
        }
      },
      1, /*serial_below=*/std::int64_t{1} << 14);
}

}  // namespace

HostTensor take_rows(const HostTensor& whole, Chunk c) {
  const Shape4 s = whole.shape();
  if (c.begin < 0 || c.end() > s.n) throw std::logic_error("take_rows: the chunk lies outside the tensor");
  HostTensor part(Shape4{s.b, s.h, c.length, s.d}, whole.dtype());
  copy_chunk_rows(static_cast<std::byte*>(part.raw()), static_cast<const std::byte*>(whole.raw()), s, c,
                  size_of(whole.dtype()), /*into_whole=*/false);
  return part;
}

void place_rows(HostTensor& whole, const HostTensor& part, Chunk c) {
  const Shape4 s = whole.shape();
  if (c.begin < 0 || c.end() > s.n || !(part.shape() == Shape4{s.b, s.h, c.length, s.d}) || part.dtype() != whole.dtype())
    throw std::logic_error("place_rows: the part does not fit the chunk");
  copy_chunk_rows(static_cast<std::byte*>(whole.raw()), static_cast<const std::byte*>(part.raw()), s, c,
                  size_of(whole.dtype()), /*into_whole=*/true);
}

}  // namespace fa::step13
