// nvtx.cuh — named ranges, so that a learner sees each stage's kernels by name in Nsight Systems
// and Nsight Compute (ncu --nvtx --nvtx-include "step03/"). Header-only NVTX 3, no library to link.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace fa {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};

}  // namespace fa
