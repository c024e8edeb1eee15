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

// The message of the last TodoNotDone made, for the exercises' reporter (common/tests/exercise_main.cpp),
// which ends a run of checks with the TODO to fill in next.
inline std::string& last_todo() {
  static std::string message;
  return message;
}

struct TodoNotDone : std::logic_error {
  explicit TodoNotDone(const std::string& what) : std::logic_error(what) { last_todo() = what; }
};

// The checks' main (exercise_main.cpp) calls this; a GPU exercise's main calls it when there is a device.
int run_exercise_checks(int argc, char** argv);

}  // namespace fa

#define FA_TODO(tag, what) throw ::fa::TodoNotDone("TODO(" tag ") is not done yet: " what)
