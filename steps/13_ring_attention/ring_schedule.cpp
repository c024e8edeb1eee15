// ring_schedule.cpp — the split of the sequence, the ring's steps and the work they hold (see the header).
#include "13_ring_attention/ring_schedule.hpp"

#include <algorithm>
#include <stdexcept>

#include "fa/problem.hpp"

namespace fa::step13 {

const char* to_string(Split split) { return split == Split::zigzag ? "zigzag" : "contiguous"; }

Split parse_split(const std::string& name) {
  if (name == "zigzag") return Split::zigzag;
  if (name == "contiguous") return Split::contiguous;
  throw UsageError("--split must be zigzag or contiguous, not '" + name + "'");
}

const char* to_string(Block block) {
  switch (block) {
    case Block::full: return "full";
    case Block::diagonal: return "diagonal";
    case Block::skipped: return "skipped";
  }
  return "?";
}

void require_schedulable(std::int64_t tokens, int gpus) {
  if (tokens < 1 || tokens > kMaxScheduleTokens)
    throw UsageError("--seq must be from 1 to 2048M tokens (the N² pairs are counted in 64-bit integers), got " +
                     std::to_string(tokens));
  if (gpus < 1) throw UsageError("--gpus must be at least 1, got " + std::to_string(gpus));
}

std::vector<Chunk> cut(std::int64_t tokens, int pieces) {
  std::vector<Chunk> chunks;
  const std::int64_t base = tokens / pieces, longer = tokens % pieces;
  std::int64_t begin = 0;
  for (int c = 0; c < pieces; ++c) {
    const std::int64_t length = base + (c < longer ? 1 : 0);
    chunks.push_back({begin, length});
    begin += length;
  }
  return chunks;
}

std::vector<Chunk> rank_chunks(std::int64_t tokens, int gpus, Split split, int rank) {
  if (split == Split::contiguous) return {cut(tokens, gpus)[rank]};
  const std::vector<Chunk> chunks = cut(tokens, 2 * gpus);
  return {chunks[rank], chunks[2 * gpus - 1 - rank]};  // one from the front, one from the back
}

Block classify(Chunk q, Chunk k, bool causal) {
  if (q.length == 0 || k.length == 0) return Block::skipped;
  if (!causal) return Block::full;
  if (k.end() - 1 <= q.begin) return Block::full;     // the last key precedes (or is) the first query
  if (k.begin > q.end() - 1) return Block::skipped;   // the first key follows the last query
  if (q == k) return Block::diagonal;
  throw std::logic_error("ring schedule: chunks that overlap without being the same");
}

std::int64_t visible_pairs(Chunk q, Chunk k, bool causal) {
  switch (classify(q, k, causal)) {
    case Block::full: return q.length * k.length;
    case Block::diagonal: return q.length * (q.length + 1) / 2;  // query i sees keys 0 .. i of its chunk
    case Block::skipped: return 0;
  }
  return 0;
}

std::int64_t step_work(std::int64_t tokens, int gpus, Split split, bool causal, int rank, int step) {
  require_schedulable(tokens, gpus);
  const std::vector<Chunk> queries = rank_chunks(tokens, gpus, split, rank);
  const std::vector<Chunk> keys = rank_chunks(tokens, gpus, split, block_owner(rank, step, gpus));
  std::int64_t pairs = 0;
  for (const Chunk& q : queries)
    for (const Chunk& k : keys) pairs += visible_pairs(q, k, causal);
  return pairs;
}

Balance balance(std::int64_t tokens, int gpus, Split split, bool causal) {
  require_schedulable(tokens, gpus);
  Balance b;
  for (int step = 0; step < gpus; ++step) {
    std::int64_t busiest = 0;
    for (int rank = 0; rank < gpus; ++rank) {
      const std::int64_t work = step_work(tokens, gpus, split, causal, rank, step);
      b.total_pairs += work;
      busiest = std::max(busiest, work);
    }
    b.critical_pairs += busiest;
  }
  b.imbalance = b.total_pairs > 0 ? static_cast<double>(b.critical_pairs) * gpus / static_cast<double>(b.total_pairs)
                                  : 1.0;
  return b;
}

}  // namespace fa::step13
