// exercise.hpp — how a starter file says "not done yet".
//
// Each hole in a starter file is one region between markers, and in the starter it holds an
// FA_TODO that names the hole:
//
//     // >>> ex01:scores
//     FA_TODO("ex01:scores", "compute S = scale * Q K^T for this head");
//     // <<< ex01:scores
//
// The region is part of a hole: a small header that the stage's own code includes with angle
// brackets (steps/NN_name/holes/, or a header of common/ that the stage taught). The starter's copy
// of that header, in exercises/NN_name/, comes first on the exercise's include path, so the stage
// runs the learner's code; in the solution's copy (solutions/NN_name/, the stage's file byte for
// byte) the region holds the code. FA_TODO throws TodoNotDone, so a starter compiles, runs, and
// fails its checks with a message that names the TODO to work on next. Device code cannot throw:
// a hole in a kernel calls fa::device_todo (fa/cuda/device_todo.cuh) instead, which the checks'
// reporter reads back through todo_probes() below. tools/course_check.py checks all of it.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

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

// What a starter's hole leaves in a result it cannot compute: NaN, so that a kernel or a caller
// built on an unfinished hole fails its comparison instead of passing by chance.
inline constexpr float kTodoNaN = __builtin_nanf("");

// A probe returns the message of a TODO that device code reached since it was last asked ("" if
// none) and forgets it. Each translation unit that includes fa/cuda/device_todo.cuh registers one;
// the exercises' reporter asks them all after every check.
using TodoProbe = std::string (*)();
inline std::vector<TodoProbe>& todo_probes() {
  static std::vector<TodoProbe> probes;
  return probes;
}
inline std::string reached_device_todo() {
  std::string first;
  for (const TodoProbe probe : todo_probes()) {
    const std::string message = probe();  // every probe is asked, so that each one forgets
    if (first.empty()) first = message;
  }
  return first;
}

// The checks' main (exercise_main.cpp) calls this; a GPU exercise's main calls it when there is a device.
int run_exercise_checks(int argc, char** argv);

}  // namespace fa

#define FA_TODO(tag, what) throw ::fa::TodoNotDone("TODO(" tag ") is not done yet: " what)
