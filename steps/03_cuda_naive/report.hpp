// report.hpp — what stage 03's executable adds to the harness (report.cpp): stage 02 on the CPU as
// a comparison capped to a second or two, and the time split among the three kernels.
#pragma once

#include <ostream>
#include <vector>

#include "fa/stage.hpp"

namespace fa::step03 {

// Stage 02 (CPU, one thread) as a comparison variant: up to N = 1024, 5 GFLOP and 3 repetitions.
Variant stage02_comparison();

// The time split among QKᵀ, softmax and PV of each measured row (StageDefinition::extra_report).
void print_kernel_split(std::ostream& os, const std::vector<ResultRow>& rows);

}  // namespace fa::step03
