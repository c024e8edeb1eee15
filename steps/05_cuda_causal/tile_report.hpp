// tile_report.hpp — stage 05's extra table: how many K/V tiles each measured size loaded and masked,
// beside stage 04's every-tile count (counted on the host with the kernel's bounds: count_tiles).
#pragma once

#include <ostream>
#include <vector>

#include "fa/results.hpp"

namespace fa::step05 {

// For StageDefinition::extra_report: one row per stage-05 result that ran.
void print_tile_counts(std::ostream& os, const std::vector<ResultRow>& rows);

}  // namespace fa::step05
