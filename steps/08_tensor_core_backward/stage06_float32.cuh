// stage06_float32.cuh — stage 06 (the float32 backward on CUDA cores, after stage 05's forward) on
// stage 08's inputs: the previous stage, beside the stage in the charts and as a second opinion
// in the tests. Its inputs are ours converted to float32 (exactly: every fp16 and bf16 value is a
// float32 value); its O and gradients are rounded back to our dtype. Stage 06 runs D = 32, 64, 128.
#pragma once

#include "fa/stage.hpp"

namespace fa::step08 {

bool stage06_runs(const Problem& p);  // D = 32, 64, 128
// The variant "06 flash-float32": stage 05's forward and stage 06's backward timed on float32
// copies (twice our bytes).
Variant stage06_in_float32();

}  // namespace fa::step08
