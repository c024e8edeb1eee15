// step13_ring_schedule — the ring of stage 13 on the CPU, drawn: which chunks of the sequence each
// GPU holds, which K/V block it works on at each step and what the causal mask leaves of it, the
// work per GPU and step and the imbalance it makes; then the ring modelled in float64 (forward and
// backward) against attention on the whole sequence. No GPU needed: this is the bookkeeping that
// the NCCL stage shares (ring_schedule.hpp, ring_model.hpp).
//
//   build/steps/13_ring_attention/step13_ring_schedule --gpus 4 --seq 4096 --causal
//   build/steps/13_ring_attention/step13_ring_schedule --gpus 4 --seq 4096 --causal --split contiguous
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "13_ring_attention/ring_model.hpp"
#include "13_ring_attention/ring_schedule.hpp"
#include "fa/cli.hpp"
#include "fa/random.hpp"

namespace {

using namespace fa::step13;

std::string chunk_list(const std::vector<Chunk>& chunks) {
  std::string s;
  for (const Chunk& c : chunks) s += (s.empty() ? "" : " + ") + ("[" + std::to_string(c.begin) + ", " + std::to_string(c.end()) + ")");
  return s;
}

// "F" full, "D" diagonal, "·" skipped, for each (query chunk, key chunk) pair of one GPU at one step.
std::string kinds(const std::vector<Chunk>& queries, const std::vector<Chunk>& keys, bool causal) {
  std::string s;
  for (const Chunk& q : queries)
    for (const Chunk& k : keys) {
      const Block b = classify(q, k, causal);
      s += b == Block::full ? "F" : b == Block::diagonal ? "D" : ".";
    }
  return s;
}

}  // namespace

// The schedule printed is the answer: when standard output could not take it (a full disk), say
// so and fail, whatever the check said.
int reported(int rc) {
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "step13_ring_schedule: error: the report could not be written to standard output\n");
    return 2;
  }
  return rc;
}

int main(int argc, char** argv) {
  int gpus = 4;
  std::string seq = "4096";
  std::string split_name = "zigzag";
  bool causal = false;
  long long model_tokens = 96;
  CLI::App app{"stage 13's ring on the CPU: the schedule of K/V blocks, the causal work per GPU, the model in float64",
               "step13_ring_schedule"};
  app.add_option("--gpus", gpus, "GPUs in the ring (P)")->check(CLI::Range(1, 64));
  app.add_option("--seq", seq, "tokens of the sequence (N; k and M suffixes, as the stages take)");
  app.add_option("--split", split_name, "zigzag or contiguous");
  app.add_flag("--causal", causal, "the causal mask (bottom-right aligned)");
  app.add_option("--model-seq", model_tokens, "N of the float64 model's check (0: skip it)")->check(CLI::Range(0LL, 4096LL));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "step13_ring_schedule: error: %s (see --help)\n", fa::one_line(e.what()).c_str());
    return 2;
  }
  try {
    const long long tokens = fa::parse_size(seq, "--seq");
    require_schedulable(tokens, gpus);
    const Split split = parse_split(split_name);
    std::printf("ring of %d GPUs, N = %lld tokens, %s split%s\n\n", gpus, tokens, to_string(split), causal ? ", causal" : "");
    for (int r = 0; r < gpus; ++r)
      std::printf("  GPU %d holds the queries (and first the K/V) of %s\n", r, chunk_list(rank_chunks(tokens, gpus, split, r)).c_str());
    std::printf("\nstep by step: the K/V block each GPU holds (its owner), what the mask leaves of it\n"
                "(F full, D diagonal, . skipped; one letter per pair of query chunk and key chunk)\n"
                "and the visible (query, key) pairs in millions; a step lasts as long as its busiest GPU\n\n");
    std::printf("  step");
    for (int r = 0; r < gpus; ++r) std::printf("  %-18s", ("GPU " + std::to_string(r)).c_str());
    std::printf("  busiest\n");
    for (int step = 0; step < gpus; ++step) {
      std::printf("  %4d", step);
      long long busiest = 0;
      for (int r = 0; r < gpus; ++r) {
        const int owner = block_owner(r, step, gpus);
        const long long work = step_work(tokens, gpus, split, causal, r, step);
        busiest = std::max(busiest, work);
        const std::string cell = "K/V " + std::to_string(owner) + " " +
                                 kinds(rank_chunks(tokens, gpus, split, r), rank_chunks(tokens, gpus, split, owner), causal);
        char pairs[32];
        std::snprintf(pairs, sizeof pairs, " %.3g", static_cast<double>(work) / 1e6);
        std::printf("  %-18s", (cell + pairs).c_str());
      }
      std::printf("  %.3g\n", static_cast<double>(busiest) / 1e6);
    }
    const Balance b = balance(tokens, gpus, split, causal);
    std::printf("\nwork counted from the schedule (not measured): %.4g M pairs in all, %.4g M on the critical path,\n"
                "ideal %.4g M: imbalance %.3f (1.000 is perfect)\n",
                static_cast<double>(b.total_pairs) / 1e6, static_cast<double>(b.critical_pairs) / 1e6,
                static_cast<double>(b.total_pairs) / gpus / 1e6, b.imbalance);

    if (model_tokens > 0) {
      fa::Problem p;
      p.batch = 1;
      p.heads = 2;
      p.seq_q = p.seq_k = model_tokens;
      p.dim = 32;
      p.causal = causal;
      const fa::AttentionData in = fa::make_inputs(p, 11);
      const ModelErrors e = model_errors(p, in, fa::make_output_grad(p, 12), gpus, split);
      const double errors[] = {e.o, e.lse, e.dq, e.dk, e.dv};
      const double worst = *std::max_element(std::begin(errors), std::end(errors));
      const bool ok = worst <= 1e-11;  // both sides in float64: only the order of the additions differs
      std::printf("\nthe ring modelled in float64 (B=1 H=2 N=%lld D=32, %d GPUs), against attention on the whole sequence:\n"
                  "  max relative error  O %.1e  LSE %.1e  dQ %.1e  dK %.1e  dV %.1e   %s\n",
                  model_tokens, gpus, errors[0], errors[1], errors[2], errors[3], errors[4], ok ? "PASS" : "FAIL");
      return reported(ok ? 0 : 1);
    }
    return reported(0);
  } catch (const fa::UsageError& e) {
    std::fprintf(stderr, "step13_ring_schedule: error: %s\n", e.what());
    return 2;
  }
}
