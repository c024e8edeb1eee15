// fuzz_npy.cpp — a bounded, deterministic mutation fuzz of the .npy reader.
//
// Valid files are mutated (bytes flipped, inserted, deleted, overwritten; Python tokens and
// awkward numbers spliced in) and handed to read_npy_bytes. Each call must either return an array
// whose data size matches its shape and dtype, or throw fa::UsageError with a one-line message;
// any other exception, or a crash or sanitizer report, fails. The seed is fixed, so a failure
// names an iteration that reproduces. A wall-clock budget keeps the test short under sanitizers.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "fa/dtype.hpp"
#include "fa/npy.hpp"
#include "fa/problem.hpp"

namespace {

// splitmix64: small, fixed-seed, the same on every platform.
struct SplitMix64 {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(next() % n); }
};

std::string npy_file(const std::string& dict, std::size_t data_bytes, int major) {
  std::string f = "\x93NUMPY";
  f += static_cast<char>(major);
  f += '\0';
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i) f += static_cast<char>((dict.size() >> (8 * i)) & 0xFF);
  f += dict;
  for (std::size_t i = 0; i < data_bytes; ++i) f += static_cast<char>(i * 37 + 11);
  return f;
}

std::vector<std::string> seeds() {
  return {
      npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(53, ' ') + "\n", 24, 1),
      npy_file("{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }\n", 6, 2),
      npy_file("{\"shape\": (), \"descr\": '>f4', # c\n 'fortran_order': False}\n", 4, 3),
      npy_file("{'descr': '|f2', 'fortran_order': False, 'shape': (1, 0, 2)}", 0, 1),
  };
}

const std::vector<std::string> kTokens = {
    "'", "\"", "(", ")", "{", "}", "[", "]", ",", ":", "#", "\n", "\r\n", "\\", " ", "\t", "0", "1", "7",
    "True", "False", "None", "-", "+", "_", "'''", "u'", "r'", "\\x", "\\u12", "\\N{", "(,)", "1.5", "1e3",
    "99999999999999999999999999", "4294967296", "1099511627776", "-1", "007", "1_0", std::string("\0", 1),
    "\xff", "\xc3\xa9", "'<f4'", "'>f2'", "'descr'", "'shape'", "'fortran_order'", "(1<<40)",
    std::string(300, '('), std::string(300, '['), std::string(50, '-'),
};

void mutate(std::string& s, SplitMix64& rng) {
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int e = 0; e < edits; ++e) {
    const std::size_t at = rng.below(s.size() + 1);
    switch (rng.below(7)) {
      case 0:  // flip a bit
        if (!s.empty()) s[at % s.size()] ^= static_cast<char>(1u << rng.below(8));
        break;
      case 1:  // insert a random byte
        s.insert(at, 1, static_cast<char>(rng.next()));
        break;
      case 2:  // delete a few bytes
        if (!s.empty()) s.erase(at % s.size(), 1 + rng.below(8));
        break;
      case 3:  // overwrite a byte
        if (!s.empty()) s[at % s.size()] = static_cast<char>(rng.next());
        break;
      case 4:  // splice a token in
        s.insert(at, kTokens[rng.below(kTokens.size())]);
        break;
      case 5: {  // replace a few bytes by a token (draws in a fixed order: same run with any compiler)
        const std::size_t n = 1 + rng.below(4);
        const std::string& token = kTokens[rng.below(kTokens.size())];
        if (!s.empty()) s.replace(at % s.size(), n, token);
        break;
      }
      default: {  // the version or the length field: 0xFF or 0x00 bytes
        const std::size_t i = 6 + rng.below(6);
        const char c = rng.below(2) ? '\xff' : '\0';
        if (s.size() >= 12) s[i] = c;
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE("fuzz: mutated .npy files are read or refused with a UsageError, nothing else") {
  constexpr int kIterations = 20000;
  constexpr auto kBudget = std::chrono::seconds(3);
  const auto start = std::chrono::steady_clock::now();
  const auto inputs = seeds();
  SplitMix64 rng{0x5EEDF00Dull};
  int ran = 0, accepted = 0;
  for (int it = 0; it < kIterations; ++it) {
    if ((it & 255) == 0 && std::chrono::steady_clock::now() - start > kBudget) break;
    std::string bytes = inputs[rng.below(inputs.size())];
    mutate(bytes, rng);
    ++ran;
    try {
      const fa::NpyArray a = fa::read_npy_bytes(bytes, "fuzz.npy");
      ++accepted;
      const bool ok = a.numel() >= 0 &&
                      a.data.size() == static_cast<std::size_t>(a.numel()) * fa::size_of(a.dtype) &&
                      (a.dtype == fa::DType::float32 || a.dtype == fa::DType::float16);
      CHECK_MESSAGE(ok, "iteration " << it << ": data size does not match the shape");
    } catch (const fa::UsageError& e) {
      const std::string msg = e.what();
      bool clean = msg.rfind("fuzz.npy: ", 0) == 0;
      for (const char c : msg) clean = clean && c >= 0x20 && c < 0x7F;
      CHECK_MESSAGE(clean, "iteration " << it << ": message is not one clean line: " << msg);
    } catch (const std::exception& e) {
      CHECK_MESSAGE(false, "iteration " << it << ": unexpected exception: " << e.what());
    } catch (...) {
      CHECK_MESSAGE(false, "iteration " << it << ": unexpected non-std exception");
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("fuzz_npy: " << ran << " inputs in " << seconds << " s, " << accepted << " accepted");
  CHECK(ran > 0);
  CHECK(accepted > 0);  // the mutations do not only break things
}
