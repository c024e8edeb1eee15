// stage05_float32.cuh — stage 05 (float32, CUDA cores) on stage 07's inputs: the previous stage,
// as the verification's second opinion and as the comparison in the charts. Its inputs are ours
// converted to float32 (exactly: every fp16 and bf16 value is a float32 value); its O is rounded
// back to our dtype for the comparison. Stage 05 runs D = 32, 64 and 128.
#pragma once

#include "fa/stage.hpp"
#include "fa/verify.hpp"

namespace fa::step07 {

bool stage05_runs(const Problem& p);  // D = 32, 64, 128
// The variant "05 skip-float32": stage 05's kernel timed on float32 copies (twice our bytes).
Variant stage05_in_float32();
// The previous stage for verify_forward.
ForwardFn stage05_reference();

}  // namespace fa::step07
