// ring_gpu.cuh — stage 13 on GPUs: one sequence's attention across a ring of GPUs, forward and
// backward, fp16/bf16. The schedule is ring_schedule.hpp's and the bookkeeping the CPU model's
// (ring_model.cpp), now with real devices: each rank keeps its query chunks; the K/V blocks travel
// the ring; each block is the single-GPU kernel of the course (stage 09 on compute capability 9.0,
// stage 07 elsewhere; for the backward stage 10 on compute capability 9.0 at D = 64, 128, 256, stage 08
// elsewhere: step10::fastest_backward) on the rank's device; the partial results are
// merged in float32 (ring_kernels.cuh). The next block's transfer runs on a second stream under the
// current block's attention.
//
// What changed from the single-GPU stages: nothing inside the kernels. Around them: the split of
// the sequence, a communicator, two streams and two K/V buffers per rank, the merge kernel, and in
// the backward dK/dV that travel with their block and come home after P hops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "13_ring_attention/ring_schedule.hpp"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/problem.hpp"
#include "fa/stage.hpp"

namespace fa::step13 {

// What the local kernels run: fp16/bf16 (float32 accumulators and merge), D = 64, 128 and 256
// (the head dims stage 09 has; stage 07 and 08 have them too).
inline const Supports kSupports{.dtypes = {DType::bfloat16, DType::float16}, .dims = {64, 128, 256}};

// How a block travels from a rank to the next.
//   nccl: ncclSend/ncclRecv on a communicator over the ranks' devices (one device per rank) — the
//         real thing, and what crosses hosts too;
//   copy: cudaMemcpyPeerAsync, which also works when ranks share a device: a ring of P "GPUs" on
//         one GPU, for the tests (the schedule, the hops and the merges run as on P devices).
// Both are the course's ring exchange, fa/cuda/peer/ring_exchange.cuh (fa::peer::built_with_nccl()
// says whether this build has NCCL).
enum class Transport { nccl, copy };
const char* to_string(Transport t);         // "nccl", "copy"
Transport parse_transport(const std::string& name);  // throws fa::UsageError

struct RingOptions {
  int gpus = 1;                    // P, the ranks of the ring
  Split split = Split::zigzag;
  Transport transport = Transport::nccl;
  bool overlap = true;             // false: each hop on the compute stream, in turn with the steps (measures the overlap)
};

// The device of each rank: rank r on device r, or with `copy` on device r mod (visible devices).
std::vector<int> rank_devices(const RingOptions& o);

// Empty when this machine can run the ring as asked; otherwise the one line of why (no CUDA device,
// fewer devices than ranks for nccl, NCCL not built in, a device older than compute capability 8.0).
std::string ring_refusal(const RingOptions& o);

// One problem's ring: the ranks' buffers (allocated here, counted per rank), streams, events and
// the transport. Self-attention of one sequence per (batch, head): Nq = Nk, Hkv = H
// (require_ring_problem). Out of device memory: fa::OutOfMemory.
class RingAttention {
 public:
  RingAttention(const Problem& p, const RingOptions& o, Pass pass);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  // The whole sequence's Q, K, V (and dO) from the host to the ranks' chunks. Blocking.
  void load(const AttentionData& in);
  // Queued on the ranks' streams; return at once. backward() needs a forward() before it (its O
  // and LSE).
  void forward();
  void backward();
  // The ranks' O, LSE (and dQ, dK, dV) into whole-sequence host tensors (shapes of AttentionResult(p)).
  // Blocking.
  void store(AttentionResult& out) const;

  // For timing with one stream's events (a stream of the current device): the ranks' streams wait
  // for `stream`'s work so far (fork_from), and `stream` waits for all of the ranks' work so far
  // (join_into).
  void fork_from(cudaStream_t stream);
  void join_into(cudaStream_t stream);

  // A measured timeline of the runs that follow record_timeline(true): per rank, when each step's
  // attention and each hop ran on its device, in ms from that run's start on the same device (the
  // ranks' starts follow one host loop: microseconds apart, not synchronized clocks). It records
  // an event pair around every step and hop; timeline() waits for the run and reads the last one.
  struct Span {
    int rank = 0;
    std::string lane;  // "compute" or "hop"
    std::string what;  // "attention", "backward", "K/V hop", "dK/dV hop"
    int step = 0;
    double start_ms = 0.0, end_ms = 0.0;
  };
  void record_timeline(bool on);
  std::vector<Span> timeline();

  struct RankMemory {
    int device = 0;
    std::int64_t io_bytes = 0;    // its chunks' Q, O, LSE and own K/V block (and dO, dQ, dK, dV)
    std::int64_t peak_bytes = 0;  // everything it allocated, at the peak: measured on its meter
  };
  std::vector<RankMemory> memory() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The harness's variant: builds the ring for the case, runs it once on poisoned outputs (the
// verified result), reports the largest rank's memory (per GPU), and times the forward (or the
// backward) alone — inputs already on the ranks — between CUDA events on device 0 that every rank
// waits for and joins (the L2 flush is device 0's only: the chunks here are larger than L2 anyway).
Variant ring_variant(const std::string& name, const RingOptions& o, Pass pass);

}  // namespace fa::step13
