// testing.hpp — the awkward shapes every stage's tests run, so that one grid covers every stage.
#pragma once

#include <cstdint>

#include "fa/problem.hpp"

namespace fa::testing {

// B = 2, H = 2 by default: more than one head, so that a wrong head offset shows.
inline Problem problem(std::int64_t nq, std::int64_t nk, std::int64_t d, bool causal, std::int64_t batch = 2,
                       std::int64_t heads = 2) {
  Problem p;
  p.batch = batch;
  p.heads = heads;
  p.seq_q = nq;
  p.seq_k = nk;
  p.dim = d;
  p.causal = causal;
  return p;
}

struct Shape {
  std::int64_t nq, nk, d;
};

// N = 1, lengths that are no multiple of any tile (32, 64), Nq != Nk both ways (with causal, the
// first rows of Nq > Nk see no key), every head dim of the course (16, 32, 64, 128).
inline constexpr Shape kAwkwardShapes[] = {{1, 1, 64},     {1, 77, 32},   {77, 1, 16},   {77, 77, 64},
                                           {129, 129, 16}, {129, 77, 128}, {77, 129, 32}, {200, 33, 64},
                                           {33, 200, 128}, {64, 65, 16}};

}  // namespace fa::testing
