// exercise.hpp — how a starter file says "not done yet".
//
// Each hole in a starter file is one region between markers, and in the starter it holds an
// FA_TODO that names the hole:
//
//     // >>> ex01:scores
//     FA_TODO("ex01:scores", "compute S = scale * Q K^T for this head");
//     // <<< ex01:scores
//
// In the solution (and in the stage source it is checked against) the same region holds the code.
// FA_TODO throws TodoNotDone, so a starter compiles, runs, and fails its checks with a message
// that names the TODO to work on next. tools/course_check.py compares the regions.
#pragma once

#include <stdexcept>
#include <string>

namespace fa {

struct TodoNotDone : std::logic_error {
  using std::logic_error::logic_error;
};

}  // namespace fa

#define FA_TODO(tag, what) throw ::fa::TodoNotDone("TODO(" tag ") is not done yet: " what)
