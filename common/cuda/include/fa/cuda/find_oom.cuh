// find_oom.cuh — where device memory runs out: the largest N (Nq = Nk) at which a stage's forward
// still fits, found by really allocating and running it. Stage 03's --find-oom uses it to chart
// memory against N up to the wall; any GPU stage with a materialized intermediate can.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fa/cli.hpp"
#include "fa/cuda/stage_gpu.cuh"

namespace fa {

// For opt.problem's B, H, D: doubles N from the first sweep size until one of `forwards` no longer
// fits (inputs, outputs and its own allocations on a meter limited by --mem-limit-gb, or the
// device), then bisects to the largest N that fits, to 1/64 of it. Prints each probe. Returns the
// sweep for the harness: the doublings that fit, that N and the first N that does not (an `oom`
// row). fa::OutOfMemory means "does not fit"; any other error propagates.
std::vector<std::int64_t> find_oom_sweep(const RunOptions& opt, const std::vector<DeviceForward>& forwards);

// The --find-oom flag's whole job after StageCli::parse: refuses --load and --seq (the search
// picks the lengths), runs the search and makes its sweep the run's sizes. nullopt: go on and run;
// otherwise the exit code, the error already printed in one line.
std::optional<int> apply_find_oom(StageCli& cli, const std::vector<DeviceForward>& forwards);

}  // namespace fa
