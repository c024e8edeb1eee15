// fuzz_npy_libfuzzer.cpp — libFuzzer entry point for the .npy reader (built with
// -DFA_LIBFUZZER=ON and Clang: -fsanitize=fuzzer,address). Every input must be read or refused
// with a UsageError; any other exception escapes and libFuzzer reports it as a crash, as it does
// for sanitizer reports.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fa/npy.hpp"
#include "fa/problem.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const fa::NpyArray a = fa::read_npy_bytes(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.npy");
    if (a.data.size() != static_cast<std::size_t>(a.numel()) * fa::size_of(a.dtype)) __builtin_trap();
  } catch (const fa::UsageError&) {
    // a refusal is a correct answer
  }
  return 0;
}
