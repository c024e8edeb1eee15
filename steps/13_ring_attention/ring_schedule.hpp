// ring_schedule.hpp — stage 13: who holds which tokens, and which key/value block each GPU works
// on at each step of the ring. Plain C++ (no GPU): the CPU model of the ring (ring_model.hpp), the
// tests, the chapter's tables and the GPU stage (ring_gpu.cu) use it.
//
// One sequence of N tokens is cut into chunks of consecutive tokens (sizes differing by at most one).
// Each of the P GPUs keeps the queries of its chunks for the whole run; the keys and values of the
// same chunks (a K/V block) travel around the ring 0 → 1 → … → P−1 → 0, one hop per step, so that
// at step s = 0 .. P−1 GPU r holds the K/V block of GPU (r − s) mod P. After P steps every GPU has
// seen every key once.
//
//   contiguous: P chunks, GPU r holds chunk r. Causal, GPU r has work only for the blocks of GPUs
//               ≤ r: GPU P−1 works at every step, GPU 0 at the first only.
//   zigzag:     2P chunks, GPU r holds chunk r (from the front) and chunk 2P−1−r (from the back).
//               Causal, every GPU has the same work at every step (ring_schedule.cpp counts it).
//
// With causal attention one block of queries against one block of keys is one of three kinds, and
// since chunks are disjoint runs of tokens, only a chunk against itself is cut by the mask:
//   full      every key precedes every query (or not causal): plain attention;
//   diagonal  the same chunk: the causal mask of the course, bottom-right aligned (query i sees key
//             j iff j ≤ i), so the single-GPU kernels run it unchanged;
//   skipped   every key follows every query: nothing to compute.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fa::step13 {

enum class Split { contiguous, zigzag };
const char* to_string(Split split);  // "contiguous", "zigzag"
Split parse_split(const std::string& name);  // throws fa::UsageError for another name

// Tokens [begin, begin + length) of the sequence.
struct Chunk {
  std::int64_t begin = 0, length = 0;
  std::int64_t end() const { return begin + length; }
  bool operator==(const Chunk&) const = default;
};

// The longest sequence whose work is counted: all N² (query, key) pairs fit a signed 64-bit count.
inline constexpr std::int64_t kMaxScheduleTokens = std::int64_t{1} << 31;
// Throws UsageError unless 1 <= tokens <= kMaxScheduleTokens and 1 <= gpus (step_work and balance
// call it; a command line calls it before printing anything).
void require_schedulable(std::int64_t tokens, int gpus);

// The sequence cut into `pieces` chunks in order; the first N mod pieces one token longer.
std::vector<Chunk> cut(std::int64_t tokens, int pieces);

// The chunks GPU `rank` of `gpus` holds (queries, and its own K/V block), in sequence order.
std::vector<Chunk> rank_chunks(std::int64_t tokens, int gpus, Split split, int rank);

// The GPU whose K/V block GPU `rank` holds at ring step `step` (0 .. gpus − 1).
inline int block_owner(int rank, int step, int gpus) { return ((rank - step) % gpus + gpus) % gpus; }

enum class Block { full, diagonal, skipped };
const char* to_string(Block block);

// What the mask leaves of queries `q` against keys `k` (the whole-sequence causal mask when `causal`).
// Throws std::logic_error for two chunks that overlap without being the same: no split makes them.
Block classify(Chunk q, Chunk k, bool causal);

// The (query, key) pairs that queries `q` see among keys `k`: the work of that block.
std::int64_t visible_pairs(Chunk q, Chunk k, bool causal);

// The work of GPU `rank` at ring step `step`: the visible pairs of its query chunks against the K/V
// block it holds then.
std::int64_t step_work(std::int64_t tokens, int gpus, Split split, bool causal, int rank, int step);

// How unevenly a split loads the GPUs. Every step ends when its slowest GPU does (the next K/V
// block must arrive everywhere), so the ring's time follows Σ_steps max_GPUs work, against the
// ideal Σ_all work / P. imbalance = the first over the second: 1.0 is perfect; contiguous causal
// is about 2 − 1/P (one GPU has a full block at every step after the first), zigzag 1.0.
struct Balance {
  std::int64_t total_pairs = 0;     // all GPUs, all steps: N·(N+1)/2 causal, N² not
  std::int64_t critical_pairs = 0;  // Σ over steps of the busiest GPU's pairs
  double imbalance = 0.0;           // critical_pairs / (total_pairs / P)
};
Balance balance(std::int64_t tokens, int gpus, Split split, bool causal);

}  // namespace fa::step13
