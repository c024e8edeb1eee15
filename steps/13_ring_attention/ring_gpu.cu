// ring_gpu.cu — stage 13's ring on GPUs (see ring_gpu.cuh). Read it beside ring_model.cpp: the same
// loop over steps, the same hops and merges, here queued on every rank's streams from one host
// thread, with events where one stream must wait for another.
//
// Per rank r, step s (block of GPU owner(r, s) in hand; P ranks):
//
//   comm stream     ── hop: send the block in hand to r+1, receive the next from r−1 ──►   (s < P−1)
//   compute stream  ── attention of each (query chunk, key chunk) pair the mask leaves, merged ──►
//
// Each stream waits only where it must: the hop of step s+1 receives into the buffer that step s−1
// computed on (event `computed`), and step s+1 computes on what that hop brought (event `arrived`).
// Two K/V buffers take turns, and the rank's own block stays in a third ("home") for the next run.
// The backward adds dK/dV (float32) that travel with their block one step behind it: a rank adds
// its contribution to the arriving sums, then sends them on; the P-th hop brings them home.
#include "13_ring_attention/ring_gpu.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <stdexcept>
#include <utility>

#include "08_tensor_core_backward/tensor_core_backward.cuh"
#include "09_hopper/hopper.cuh"
#include "10_hopper_backward/hopper_backward.cuh"
#include "13_ring_attention/ring_kernels.cuh"
#include "13_ring_attention/ring_layout.hpp"
#include "13_ring_attention/ring_model.hpp"
#include "fa/cuda/device.cuh"
#include "fa/cuda/event_timer.cuh"
#include "fa/cuda/peer/ring_exchange.cuh"

namespace fa::step13 {
namespace {

using peer::DeviceScope;
using peer::Exchange;

// ---- small helpers --------------------------------------------------------------------------

constexpr int kThreads = 256;
unsigned grid_for(std::int64_t n) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((n + kThreads - 1) / kThreads, 1, 8192));
}

// ---- the kernels of one block, by dtype and D -----------------------------------------------

template <class T>
void launch_merge(const Problem& p, float* o_acc, float* lse_acc, const void* o_b, const float* lse_b,
                  std::int64_t rows, cudaStream_t stream) {
  const unsigned blocks = grid_for(rows * 32);  // a warp per row
  const T* block_o = static_cast<const T*>(o_b);
  switch (p.dim) {
    case 64: merge_block_kernel<T, 64><<<blocks, kThreads, 0, stream>>>(o_acc, lse_acc, block_o, lse_b, rows); break;
    case 128: merge_block_kernel<T, 128><<<blocks, kThreads, 0, stream>>>(o_acc, lse_acc, block_o, lse_b, rows); break;
    default: merge_block_kernel<T, 256><<<blocks, kThreads, 0, stream>>>(o_acc, lse_acc, block_o, lse_b, rows); break;
  }
  FA_CUDA_CHECK_LAUNCH();
}
void merge(const Problem& p, float* o_acc, float* lse_acc, const void* o_b, const float* lse_b, std::int64_t rows,
           cudaStream_t stream) {
  if (p.dtype == DType::float16) launch_merge<__half>(p, o_acc, lse_acc, o_b, lse_b, rows, stream);
  else launch_merge<__nv_bfloat16>(p, o_acc, lse_acc, o_b, lse_b, rows, stream);
}

void fill(float* out, float value, std::int64_t n, cudaStream_t stream) {
  fill_kernel<<<grid_for(n), kThreads, 0, stream>>>(out, value, n);
  FA_CUDA_CHECK_LAUNCH();
}
// acc += add, where add is float32 (`add_is_float`) or the problem's 16-bit dtype.
void accumulate(const Problem& p, float* acc, const void* add, bool add_is_float, std::int64_t n, cudaStream_t stream) {
  if (add_is_float) accumulate_kernel<float><<<grid_for(n), kThreads, 0, stream>>>(acc, static_cast<const float*>(add), n);
  else if (p.dtype == DType::float16)
    accumulate_kernel<__half><<<grid_for(n), kThreads, 0, stream>>>(acc, static_cast<const __half*>(add), n);
  else accumulate_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, stream>>>(acc, static_cast<const __nv_bfloat16*>(add), n);
  FA_CUDA_CHECK_LAUNCH();
}
void round_to(const Problem& p, void* out, const float* in, std::int64_t n, cudaStream_t stream) {
  if (p.dtype == DType::float16) round_kernel<__half><<<grid_for(n), kThreads, 0, stream>>>(static_cast<__half*>(out), in, n);
  else round_kernel<__nv_bfloat16><<<grid_for(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), in, n);
  FA_CUDA_CHECK_LAUNCH();
}

// ---- one rank -------------------------------------------------------------------------------

// One of a rank's query chunks and what belongs to its tokens.
struct QueryChunk {
  Chunk chunk;
  DeviceTensor q, o, lse;         // [B, H, len, D] p.dtype; lse [B, H, len, 1] float32, also the running LSE
  DeviceBuffer<float> o_acc;      // the running O, float32
  DeviceTensor d_o, dq, dk, dv;   // backward: dO in; dQ out; this chunk's keys' dK, dV out
  DeviceBuffer<float> dq_acc;     // backward: dQ summed over the steps, float32
};

struct Rank {
  int index = 0, device = 0;
  MemoryMeter meter;
  std::unique_ptr<DeviceContext> ctx;  // ctx->stream is the compute stream; the backward's scratch lives here
  cudaStream_t compute = nullptr, comm = nullptr;
  cudaEvent_t begin = nullptr, computed[2] = {}, arrived[2] = {}, dkv_ready = nullptr, dkv_arrived[2] = {};
  std::vector<QueryChunk> chunks;
  DeviceBuffer<std::byte> home;        // its own K/V block (the one it starts with, kept for the next run)
  DeviceBuffer<std::byte> kv[2];       // the blocks that arrive, taking turns
  DeviceBuffer<std::byte> o_b, dq_b, dk_b, dv_b;  // one block's results (p.dtype), sized for the longest chunk
  DeviceBuffer<float> lse_b;
  DeviceBuffer<float> dkv[2], dkv_local;  // backward: the travelling dK/dV sums, and this step's part
  std::int64_t io_bytes = 0;

  explicit Rank(std::int64_t mem_limit) : meter(mem_limit) {}
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;
  ~Rank() {  // also when the ring's constructor gave up half-way
    DeviceScope on(device);
    if (compute) cudaStreamSynchronize(compute);
    if (comm) cudaStreamSynchronize(comm);
    for (cudaEvent_t e : {begin, computed[0], computed[1], arrived[0], arrived[1], dkv_ready, dkv_arrived[0], dkv_arrived[1]})
      if (e) cudaEventDestroy(e);
    ctx.reset();  // its scratch, and the buffers below, freed with this rank's device current
    chunks.clear();
    for (DeviceBuffer<std::byte>* b : {&home, &kv[0], &kv[1], &o_b, &dq_b, &dk_b, &dv_b}) *b = {};
    for (DeviceBuffer<float>* b : {&lse_b, &dkv[0], &dkv[1], &dkv_local}) *b = {};
    if (compute) cudaStreamDestroy(compute);
    if (comm) cudaStreamDestroy(comm);
  }
  // The stream a hop runs on: the comm stream, or the compute stream when hops do not overlap.
  cudaStream_t hop_stream(bool overlap) const { return overlap ? comm : compute; }
  std::byte* block(int step) { return step == 0 ? home.data() : kv[step % 2].data(); }
};

}  // namespace

// ---- the ring ---------------------------------------------------------------------------------

struct RingAttention::Impl {
  Problem p;
  RingOptions opt;
  Pass pass;
  int P = 1;
  std::vector<BlockLayout> kv_layout, dkv_layout;  // per owner rank: its block in p.dtype, and in float32
  std::deque<Rank> ranks;  // a deque: a Rank never moves (its buffers and context point to its meter)
  std::unique_ptr<Exchange> exchange;

  // The timeline (record_timeline): an event pair per step and hop, times from `origin` per rank.
  struct Mark {
    int rank = 0;
    const char* lane = "";
    const char* what = "";
    int step = 0;
    cudaEvent_t start = nullptr, end = nullptr;
  };
  bool loaded = false, forward_done = false;
  bool recording = false;
  std::vector<Mark> marks;
  std::vector<cudaEvent_t> origin;

  Impl(const Problem& problem, const RingOptions& o, Pass pass_, std::int64_t mem_limit);
  ~Impl();
  void start_run();  // every run's start: streams joined, the timeline's origin
  std::size_t open_mark(const Rank& rk, cudaStream_t stream, const char* lane, const char* what, int step);
  void close_mark(std::size_t mark, cudaStream_t stream);
  void clear_marks();
  void attend_step(Rank& rk, int step);
  void backward_step(Rank& rk, int step);
  void hop(int step, bool gradients);
};

RingAttention::Impl::Impl(const Problem& problem, const RingOptions& o, Pass pass_, std::int64_t mem_limit)
    : p(problem), opt(o), pass(pass_), P(o.gpus) {
  require_ring_problem(p, P);
  p.require(kSupports);
  if (const std::string why = ring_refusal(opt); !why.empty()) throw UsageError(why);
  const std::vector<int> devices = rank_devices(opt);
  const std::size_t element = size_of(p.dtype);
  for (int r = 0; r < P; ++r) {
    kv_layout.push_back(block_layout(p, rank_chunks(p.seq_k, P, opt.split, r), element));
    dkv_layout.push_back(block_layout(p, rank_chunks(p.seq_k, P, opt.split, r), sizeof(float)));
  }
  std::size_t max_block = 0, max_dkv = 0;
  std::int64_t max_chunk = 1;
  for (int r = 0; r < P; ++r) {
    max_block = std::max(max_block, kv_layout[r].bytes);
    max_dkv = std::max(max_dkv, dkv_layout[r].bytes);
    for (const Chunk& c : kv_layout[r].chunks) max_chunk = std::max(max_chunk, c.length);
  }
  const std::int64_t heads = p.batch * p.heads;
  const std::size_t chunk_elements = static_cast<std::size_t>(heads * max_chunk * p.dim);

  for (int r = 0; r < P; ++r) ranks.emplace_back(mem_limit);
  for (int r = 0; r < P; ++r) {
    Rank& rk = ranks[r];
    rk.index = r;
    rk.device = devices[r];
    DeviceScope on(rk.device);
    FA_CUDA_CHECK(cudaStreamCreateWithFlags(&rk.compute, cudaStreamNonBlocking));
    FA_CUDA_CHECK(cudaStreamCreateWithFlags(&rk.comm, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&rk.begin, &rk.computed[0], &rk.computed[1], &rk.arrived[0], &rk.arrived[1], &rk.dkv_ready,
                           &rk.dkv_arrived[0], &rk.dkv_arrived[1]})
      FA_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
    rk.ctx = std::make_unique<DeviceContext>(rk.meter, rk.compute);

    // The inputs and outputs of its tokens: io.
    for (const Chunk& c : kv_layout[r].chunks) {
      QueryChunk qc;
      qc.chunk = c;
      const std::int64_t rows = std::max<std::int64_t>(c.length, 1);  // an empty chunk (N < 2P) still gets a buffer
      qc.q = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
      qc.o = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
      qc.lse = DeviceTensor(rk.meter, rows_shape(p, rows, 1), DType::float32);
      if (pass == Pass::backward) {
        qc.d_o = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
        qc.dq = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
        qc.dk = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
        qc.dv = DeviceTensor(rk.meter, rows_shape(p, rows, p.dim), p.dtype);
      }
      rk.chunks.push_back(std::move(qc));
    }
    rk.home = DeviceBuffer<std::byte>(rk.meter, std::max<std::size_t>(kv_layout[r].bytes, 16));
    rk.io_bytes = rk.meter.current();
    for (QueryChunk& qc : rk.chunks) {
      qc.o.poison();
      qc.lse.poison();
      if (pass == Pass::backward) {
        qc.dq.poison();
        qc.dk.poison();
        qc.dv.poison();
      }
    }

    // What the ring adds: the travelling blocks, the float32 accumulators, one block's results.
    if (P > 1)
      for (auto& buffer : rk.kv) buffer = DeviceBuffer<std::byte>(rk.meter, max_block);
    for (QueryChunk& qc : rk.chunks)
      qc.o_acc = DeviceBuffer<float>(rk.meter, static_cast<std::size_t>(heads * std::max<std::int64_t>(qc.chunk.length, 1) * p.dim));
    rk.o_b = DeviceBuffer<std::byte>(rk.meter, chunk_elements * element);
    rk.lse_b = DeviceBuffer<float>(rk.meter, static_cast<std::size_t>(heads * max_chunk));
    if (pass == Pass::backward) {
      for (QueryChunk& qc : rk.chunks) qc.dq_acc = DeviceBuffer<float>(rk.meter, qc.o_acc.size());
      rk.dq_b = DeviceBuffer<std::byte>(rk.meter, chunk_elements * element);
      rk.dk_b = DeviceBuffer<std::byte>(rk.meter, chunk_elements * element);
      rk.dv_b = DeviceBuffer<std::byte>(rk.meter, chunk_elements * element);
      for (int i = 0; i < (P > 1 ? 2 : 1); ++i) rk.dkv[i] = DeviceBuffer<float>(rk.meter, max_dkv / sizeof(float));
      rk.dkv_local = DeviceBuffer<float>(rk.meter, max_dkv / sizeof(float));
    }
  }
  for (Rank& rk : ranks) {  // the poisoning above ran on the legacy stream, which the ranks' streams do not wait for
    DeviceScope on(rk.device);
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  if (P > 1) {
    if (opt.transport == Transport::nccl) exchange = peer::make_nccl_exchange(devices);
    if (opt.transport == Transport::copy) exchange = peer::make_copy_exchange(devices);
  }
}

RingAttention::Impl::~Impl() {
  for (Rank& rk : ranks) {  // nothing may still run on what is freed below
    DeviceScope on(rk.device);
    cudaStreamSynchronize(rk.compute);
    cudaStreamSynchronize(rk.comm);
  }
  clear_marks();
  for (std::size_t r = 0; r < origin.size(); ++r) {
    DeviceScope on(ranks[r].device);
    cudaEventDestroy(origin[r]);
  }
  exchange.reset();  // then the ranks, each with its streams and events (~Rank)
}

void RingAttention::Impl::clear_marks() {
  for (const Mark& m : marks) {
    DeviceScope on(ranks[m.rank].device);
    cudaEventDestroy(m.start);
    cudaEventDestroy(m.end);
  }
  marks.clear();
}

void RingAttention::Impl::start_run() {
  if (recording) clear_marks();
  for (Rank& rk : ranks) {
    DeviceScope on(rk.device);
    // A new run: the comm stream starts after the last run's computing (its buffers are free).
    FA_CUDA_CHECK(cudaEventRecord(rk.begin, rk.compute));
    FA_CUDA_CHECK(cudaStreamWaitEvent(rk.comm, rk.begin, 0));
    if (recording) FA_CUDA_CHECK(cudaEventRecord(origin[rk.index], rk.compute));
  }
}

std::size_t RingAttention::Impl::open_mark(const Rank& rk, cudaStream_t stream, const char* lane, const char* what,
                                           int step) {
  if (!recording) return 0;
  DeviceScope on(rk.device);
  Mark m{rk.index, lane, what, step, nullptr, nullptr};
  FA_CUDA_CHECK(cudaEventCreate(&m.start));
  FA_CUDA_CHECK(cudaEventCreate(&m.end));
  FA_CUDA_CHECK(cudaEventRecord(m.start, stream));
  marks.push_back(m);
  return marks.size() - 1;
}

void RingAttention::Impl::close_mark(std::size_t mark, cudaStream_t stream) {
  if (!recording) return;
  DeviceScope on(ranks[marks[mark].rank].device);
  FA_CUDA_CHECK(cudaEventRecord(marks[mark].end, stream));
}

namespace {

// The problem one block pair poses to the single-GPU kernels: its query chunk against its key
// chunk, causal only on the diagonal (where the kernels' bottom-right mask is the sequence's).
Problem pair_problem(const Problem& p, Chunk q, Chunk k, Block kind) {
  Problem pp = p;
  pp.seq_q = q.length;
  pp.seq_k = k.length;
  pp.causal = kind == Block::diagonal;
  return pp;
}

// f(query chunk, its problem against key chunk b, the kernels' inputs, b) for each pair of one of
// the rank's query chunks and one of the block's key chunks that the mask leaves, at `step`.
template <class F>
void for_each_pair(const Problem& p, Rank& rk, const BlockLayout& kv, std::byte* block, F&& f) {
  for (QueryChunk& qc : rk.chunks)
    for (std::size_t b = 0; b < kv.chunks.size(); ++b) {
      const Block kind = classify(qc.chunk, kv.chunks[b], p.causal);
      if (kind == Block::skipped) continue;
      const Problem pp = pair_problem(p, qc.chunk, kv.chunks[b], kind);
      const Shape4 k_shape = rows_shape(p, pp.seq_k, p.dim);
      const AttentionInputs in{ConstTensorView(qc.q.view().data, p.dtype, rows_shape(p, pp.seq_q, p.dim)),
                               ConstTensorView(block + kv.k_at[b], p.dtype, k_shape),
                               ConstTensorView(block + kv.v_at[b], p.dtype, k_shape)};
      f(qc, pp, in, b);
    }
}

}  // namespace

void RingAttention::Impl::attend_step(Rank& rk, int step) {
  const BlockLayout& kv = kv_layout[block_owner(rk.index, step, P)];
  for_each_pair(p, rk, kv, rk.block(step), [&](QueryChunk& qc, const Problem& pp, const AttentionInputs& in, std::size_t) {
    const AttentionOutputs out{TensorView(rk.o_b.data(), p.dtype, rows_shape(p, pp.seq_q, p.dim)),
                               TensorView(rk.lse_b.data(), DType::float32, rows_shape(p, pp.seq_q, 1))};
    step09::fastest_forward(pp, in, out, *rk.ctx);  // stage 09's overlap rung on 9.0, stage 07 elsewhere
    merge(p, qc.o_acc.data(), static_cast<float*>(qc.lse.view().data), rk.o_b.data(), rk.lse_b.data(),
          p.batch * p.heads * pp.seq_q, rk.compute);
  });
}

void RingAttention::Impl::backward_step(Rank& rk, int step) {
  const int owner = block_owner(rk.index, step, P);
  const BlockLayout& dkv = dkv_layout[owner];
  float* local = rk.dkv_local.data();
  fill(local, 0.0f, static_cast<std::int64_t>(dkv.bytes / sizeof(float)), rk.compute);
  for_each_pair(p, rk, kv_layout[owner], rk.block(step),
                [&](QueryChunk& qc, const Problem& pp, const AttentionInputs& in, std::size_t b) {
    // The whole row's O and LSE (the forward's, final): P = exp(S − LSE) and D = rowsum(dO ∘ O)
    // are then the whole sequence's, and each block's gradients are its share of the sums.
    const Shape4 q_shape = rows_shape(p, pp.seq_q, p.dim), k_shape = rows_shape(p, pp.seq_k, p.dim);
    const AttentionGradients grads{TensorView(rk.dq_b.data(), p.dtype, q_shape),
                                   TensorView(rk.dk_b.data(), p.dtype, k_shape),
                                   TensorView(rk.dv_b.data(), p.dtype, k_shape)};
    // Stage 10's backward on compute capability 9.0 (D = 64, 128), stage 08's elsewhere.
    step10::fastest_backward(pp, in, qc.o.view(), qc.lse.view(), qc.d_o.view(), grads, *rk.ctx);
    const std::int64_t q_elems = q_shape.numel(), k_elems = k_shape.numel();
    accumulate(p, qc.dq_acc.data(), rk.dq_b.data(), false, q_elems, rk.compute);
    accumulate(p, local + dkv.k_at[b] / sizeof(float), rk.dk_b.data(), false, k_elems, rk.compute);
    accumulate(p, local + dkv.v_at[b] / sizeof(float), rk.dv_b.data(), false, k_elems, rk.compute);
  });
}

// The hop after `step`: every rank passes on what it holds for that step and receives what the
// previous rank held. K/V (gradients = false): the block, as soon as the buffer it lands in is free
// (the step before computed on it); it brings step + 1's block. dK/dV (gradients = true): the sums,
// once this step's part is added in.
void RingAttention::Impl::hop(int step, bool gradients) {
  const std::vector<BlockLayout>& layout = gradients ? dkv_layout : kv_layout;
  std::vector<const void*> send(P);
  std::vector<void*> recv(P);
  std::vector<std::size_t> send_bytes(P), recv_bytes(P);
  std::vector<cudaStream_t> streams(P);
  std::vector<std::size_t> mark(P);
  for (int r = 0; r < P; ++r) {
    Rank& rk = ranks[r];
    DeviceScope on(rk.device);
    streams[r] = rk.hop_stream(opt.overlap);
    if (gradients) FA_CUDA_CHECK(cudaStreamWaitEvent(streams[r], rk.dkv_ready, 0));
    else if (step >= 1) FA_CUDA_CHECK(cudaStreamWaitEvent(streams[r], rk.computed[(step - 1) % 2], 0));
    send[r] = gradients ? static_cast<const void*>(rk.dkv[step % 2].data()) : rk.block(step);
    recv[r] = gradients ? static_cast<void*>(rk.dkv[(step + 1) % 2].data()) : rk.block(step + 1);
    send_bytes[r] = layout[block_owner(r, step, P)].bytes;
    recv_bytes[r] = layout[block_owner(r, step + 1, P)].bytes;
    mark[r] = open_mark(rk, streams[r], "hop", gradients ? "dK/dV hop" : "K/V hop", gradients ? step : step + 1);
  }
  exchange->hop(send, send_bytes, recv, recv_bytes, streams);
  for (int r = 0; r < P; ++r) {
    close_mark(mark[r], streams[r]);
    DeviceScope on(ranks[r].device);
    cudaEvent_t done = gradients ? ranks[r].dkv_arrived[(step + 1) % 2] : ranks[r].arrived[(step + 1) % 2];
    FA_CUDA_CHECK(cudaEventRecord(done, streams[r]));
  }
}

RingAttention::RingAttention(const Problem& p, const RingOptions& o, Pass pass)
    : impl_(std::make_unique<Impl>(p, o, pass, 0)) {}
RingAttention::~RingAttention() = default;

void RingAttention::load(const AttentionData& in) {
  Impl& m = *impl_;
  for (Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    // Plain cudaMemcpy runs on the legacy stream, which the ranks' (non-blocking) streams do not
    // wait for: nothing queued may still read what is overwritten, and after the copies the device
    // is synchronized, so that the next run reads them whole.
    FA_CUDA_CHECK(cudaStreamSynchronize(rk.compute));
    FA_CUDA_CHECK(cudaStreamSynchronize(rk.comm));
    const BlockLayout& own = m.kv_layout[rk.index];
    for (std::size_t c = 0; c < rk.chunks.size(); ++c) {
      QueryChunk& qc = rk.chunks[c];
      if (qc.chunk.length == 0) continue;
      qc.q.upload(take_rows(in.q, qc.chunk));
      const HostTensor k = take_rows(in.k, qc.chunk), v = take_rows(in.v, qc.chunk);
      FA_CUDA_CHECK(cudaMemcpy(rk.home.data() + own.k_at[c], k.raw(), k.bytes(), cudaMemcpyHostToDevice));
      FA_CUDA_CHECK(cudaMemcpy(rk.home.data() + own.v_at[c], v.raw(), v.bytes(), cudaMemcpyHostToDevice));
      if (m.pass == Pass::backward) qc.d_o.upload(take_rows(in.d_o, qc.chunk));
    }
    FA_CUDA_CHECK(cudaDeviceSynchronize());
  }
  m.loaded = true;
}

void RingAttention::forward() {
  Impl& m = *impl_;
  if (!m.loaded) throw std::logic_error("RingAttention::forward: load() the inputs first");
  m.start_run();
  for (Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    for (QueryChunk& qc : rk.chunks) {  // the running pair of a row that has seen no key: (0, −inf)
      fill(qc.o_acc.data(), 0.0f, static_cast<std::int64_t>(qc.o_acc.size()), rk.compute);
      fill(static_cast<float*>(qc.lse.view().data), -INFINITY, qc.lse.view().numel(), rk.compute);
    }
  }
  for (int step = 0; step < m.P; ++step) {
    if (step + 1 < m.P) m.hop(step, false);  // queued first, so that it runs under this step's attention
    for (Rank& rk : m.ranks) {
      DeviceScope on(rk.device);
      if (step >= 1) FA_CUDA_CHECK(cudaStreamWaitEvent(rk.compute, rk.arrived[step % 2], 0));
      const std::size_t mark = m.open_mark(rk, rk.compute, "compute", "attention", step);
      m.attend_step(rk, step);
      m.close_mark(mark, rk.compute);
      FA_CUDA_CHECK(cudaEventRecord(rk.computed[step % 2], rk.compute));
    }
  }
  for (Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    for (QueryChunk& qc : rk.chunks)
      round_to(m.p, qc.o.view().data, qc.o_acc.data(), static_cast<std::int64_t>(qc.o_acc.size()), rk.compute);
  }
  m.forward_done = true;
}

void RingAttention::backward() {
  Impl& m = *impl_;
  if (m.pass != Pass::backward) throw std::logic_error("RingAttention::backward: built for the forward only");
  if (!m.forward_done) throw std::logic_error("RingAttention::backward: run forward() first (its O and LSE)");
  m.start_run();
  for (Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    for (QueryChunk& qc : rk.chunks) fill(qc.dq_acc.data(), 0.0f, static_cast<std::int64_t>(qc.dq_acc.size()), rk.compute);
    fill(rk.dkv[0].data(), 0.0f, static_cast<std::int64_t>(rk.dkv[0].size()), rk.compute);  // step 0's sums start at 0
  }
  for (int step = 0; step < m.P; ++step) {
    if (step + 1 < m.P) m.hop(step, false);
    for (Rank& rk : m.ranks) {
      DeviceScope on(rk.device);
      if (step >= 1) FA_CUDA_CHECK(cudaStreamWaitEvent(rk.compute, rk.arrived[step % 2], 0));
      const std::size_t mark = m.open_mark(rk, rk.compute, "compute", "backward", step);
      m.backward_step(rk, step);
      m.close_mark(mark, rk.compute);
      // The sums of this block's dK/dV from the ranks before this one arrive during the step
      // above; add this rank's part, then pass them on.
      if (step >= 1) FA_CUDA_CHECK(cudaStreamWaitEvent(rk.compute, rk.dkv_arrived[step % 2], 0));
      const std::int64_t n = static_cast<std::int64_t>(m.dkv_layout[block_owner(rk.index, step, m.P)].bytes / sizeof(float));
      accumulate(m.p, rk.dkv[step % 2].data(), rk.dkv_local.data(), true, n, rk.compute);
      FA_CUDA_CHECK(cudaEventRecord(rk.dkv_ready, rk.compute));
      FA_CUDA_CHECK(cudaEventRecord(rk.computed[step % 2], rk.compute));
    }
    if (m.P > 1) m.hop(step, true);  // the last one (step P − 1) brings every block's sums home
  }
  for (Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    const int home = m.P > 1 ? m.P % 2 : 0;
    if (m.P > 1) FA_CUDA_CHECK(cudaStreamWaitEvent(rk.compute, rk.dkv_arrived[home], 0));
    const BlockLayout& own = m.dkv_layout[rk.index];
    for (std::size_t c = 0; c < rk.chunks.size(); ++c) {
      QueryChunk& qc = rk.chunks[c];
      const std::int64_t n = m.p.batch * m.p.heads * qc.chunk.length * m.p.dim;
      round_to(m.p, qc.dq.view().data, qc.dq_acc.data(), n, rk.compute);
      round_to(m.p, qc.dk.view().data, rk.dkv[home].data() + own.k_at[c] / sizeof(float), n, rk.compute);
      round_to(m.p, qc.dv.view().data, rk.dkv[home].data() + own.v_at[c] / sizeof(float), n, rk.compute);
    }
  }
}

void RingAttention::store(AttentionResult& out) const {
  const Impl& m = *impl_;
  for (const Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    FA_CUDA_CHECK(cudaStreamSynchronize(rk.compute));
    FA_CUDA_CHECK(cudaStreamSynchronize(rk.comm));
  }
  for (const Rank& rk : m.ranks) {
    DeviceScope on(rk.device);
    for (const QueryChunk& qc : rk.chunks) {
      if (qc.chunk.length == 0) continue;
      auto fetch = [&](const DeviceTensor& t, HostTensor& whole, std::int64_t width, DType dtype) {
        HostTensor part(rows_shape(m.p, qc.chunk.length, width), dtype);
        t.download(part);
        place_rows(whole, part, qc.chunk);
      };
      fetch(qc.o, out.o, m.p.dim, m.p.dtype);
      fetch(qc.lse, out.lse, 1, DType::float32);
      if (m.pass == Pass::backward) {
        fetch(qc.dq, out.dq, m.p.dim, m.p.dtype);
        fetch(qc.dk, out.dk, m.p.dim, m.p.dtype);
        fetch(qc.dv, out.dv, m.p.dim, m.p.dtype);
      }
    }
  }
}

void RingAttention::fork_from(cudaStream_t stream) {  // `stream` belongs to the current device
  cudaEvent_t start = nullptr;
  FA_CUDA_CHECK(cudaEventCreateWithFlags(&start, cudaEventDisableTiming));
  FA_CUDA_CHECK(cudaEventRecord(start, stream));
  for (Rank& rk : impl_->ranks) {
    DeviceScope on(rk.device);
    FA_CUDA_CHECK(cudaStreamWaitEvent(rk.compute, start, 0));
    FA_CUDA_CHECK(cudaStreamWaitEvent(rk.comm, start, 0));
  }
  FA_CUDA_CHECK(cudaEventDestroy(start));  // released once the waits have happened
}

void RingAttention::join_into(cudaStream_t stream) {
  for (Rank& rk : impl_->ranks) {
    DeviceScope on(rk.device);
    cudaEvent_t done = nullptr;
    FA_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    FA_CUDA_CHECK(cudaEventRecord(done, rk.compute));  // the compute stream has waited for every hop it needs
    FA_CUDA_CHECK(cudaStreamWaitEvent(stream, done, 0));
    FA_CUDA_CHECK(cudaEventDestroy(done));
  }
}

void RingAttention::record_timeline(bool on) {
  Impl& m = *impl_;
  if (on && m.origin.empty())
    for (Rank& rk : m.ranks) {
      DeviceScope scope(rk.device);
      cudaEvent_t e = nullptr;
      FA_CUDA_CHECK(cudaEventCreate(&e));
      m.origin.push_back(e);
    }
  m.recording = on;
}

std::vector<RingAttention::Span> RingAttention::timeline() {
  Impl& m = *impl_;
  std::vector<Span> spans;
  for (const Impl::Mark& mark : m.marks) {
    DeviceScope on(m.ranks[mark.rank].device);
    FA_CUDA_CHECK(cudaEventSynchronize(mark.end));
    float start = 0.0f, end = 0.0f;
    FA_CUDA_CHECK(cudaEventElapsedTime(&start, m.origin[mark.rank], mark.start));
    FA_CUDA_CHECK(cudaEventElapsedTime(&end, m.origin[mark.rank], mark.end));
    spans.push_back({mark.rank, mark.lane, mark.what, mark.step, start, end});
  }
  return spans;
}

std::vector<RingAttention::RankMemory> RingAttention::memory() const {
  std::vector<RankMemory> out;
  for (const Rank& rk : impl_->ranks) out.push_back({rk.device, rk.io_bytes, rk.meter.peak()});
  return out;
}

// ---- options, refusals, the variant ----------------------------------------------------------

const char* to_string(Transport t) { return t == Transport::copy ? "copy" : "nccl"; }

Transport parse_transport(const std::string& name) {
  if (name == "nccl") return Transport::nccl;
  if (name == "copy") return Transport::copy;
  throw UsageError("--transport must be nccl or copy, not '" + name + "'");
}

std::vector<int> rank_devices(const RingOptions& o) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) count = 1;
  std::vector<int> devices(o.gpus);
  for (int r = 0; r < o.gpus; ++r) devices[r] = o.transport == Transport::copy ? r % count : r;
  return devices;
}

std::string ring_refusal(const RingOptions& o) {
  if (std::string why = cuda_skip_reason(80); !why.empty()) return why;
  int count = 0;
  FA_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (o.gpus < 1) return "--gpus must be at least 1";
  if (o.transport == Transport::nccl && o.gpus > 1) {
    if (!peer::built_with_nccl()) return "built without NCCL (not found at configure time): use --transport copy, or configure with -DFA_NCCL_ROOT=<NCCL's folder>";
    if (o.gpus > count)
      return "--gpus " + std::to_string(o.gpus) + " needs " + std::to_string(o.gpus) + " GPUs for NCCL; this machine has " +
             std::to_string(count) + " (--transport copy runs the ranks on fewer)";
  }
  for (int d = 0; d < std::min(o.gpus, count); ++d) {
    const DeviceInfo info = query_device(d);
    if (info.compute_major < 8)
      return "device " + std::to_string(d) + " (" + info.name + ") is compute capability " + std::to_string(info.compute_major) +
             "." + std::to_string(info.compute_minor) + "; the ring's kernels need 8.0";
  }
  return "";
}


Variant ring_variant(const std::string& name, const RingOptions& o, Pass pass) {
  Variant v;
  v.stage = "13";
  v.name = name;
  v.ours = true;
  v.run = [o, pass](const Problem& p, const AttentionData& in, AttentionResult& out, const RunConfig& cfg) {
    Measurement m;
    auto ring = std::make_unique<RingAttention>(p, o, pass);
    ring->load(in);
    ring->forward();
    if (pass == Pass::backward) ring->backward();
    ring->store(out);  // the verified result: the first run, on poisoned outputs
    for (const RingAttention::RankMemory& r : ring->memory()) {
      m.peak_bytes = std::max(m.peak_bytes, r.peak_bytes);
      m.extra_bytes = std::max(m.extra_bytes, r.peak_bytes - r.io_bytes);
    }
    m.note = "memory per GPU (the largest rank)";
    const std::vector<int> devices = rank_devices(o);
    DeviceScope on(devices.front());
    cudaStream_t stream = nullptr;
    FA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    m.time = time_device(
        [&](cudaStream_t s) {
          ring->fork_from(s);
          if (pass == Pass::backward) ring->backward();
          else ring->forward();
          ring->join_into(s);
        },
        stream, cfg.warmup, cfg.reps);
    FA_CUDA_CHECK(cudaStreamSynchronize(stream));
    FA_CUDA_CHECK(cudaStreamDestroy(stream));
    return m;
  };
  return v;
}

}  // namespace fa::step13
