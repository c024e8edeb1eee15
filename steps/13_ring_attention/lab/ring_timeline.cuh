// ring_timeline.cuh — `step13_ring_attention --timeline FILE`: the ring as it ran, for chapter 13's
// figure (docs/plots/draw_ring_timeline.py). One warm-up run, then one recorded run of the ring at
// the sweep's last length; per rank, when each step's attention and each hop ran, as JSON, and a
// line per rank on stdout. It measures; the lesson is in ring_gpu.cu.
#pragma once

#include <string>

#include "13_ring_attention/ring_gpu.cuh"
#include "fa/stage.hpp"

namespace fa::step13 {

// Exit code: 0 written, 2 bad usage (the file cannot be written), 77 this machine cannot run the
// ring as asked (ring_refusal, printed).
int write_ring_timeline(const RunOptions& opt, const RingOptions& ring, Pass pass, const std::string& path);

}  // namespace fa::step13
