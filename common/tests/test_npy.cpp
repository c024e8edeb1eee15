#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "fa/npy.hpp"
#include "fa/random.hpp"

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fa_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string npy_header(const std::string& dict) {
  std::string h = "\x93NUMPY";
  h += '\x01';
  h += '\x00';
  h += static_cast<char>(dict.size() & 0xFF);
  h += static_cast<char>(dict.size() >> 8);
  return h + dict;
}

}  // namespace

TEST_CASE(".npy float32 round trip keeps shape and every bit") {
  fa::Problem p;
  p.batch = 2, p.heads = 3, p.seq_q = p.seq_k = 5, p.dim = 7;
  const auto in = fa::make_inputs(p, 11);
  const std::string path = temp_path("roundtrip.npy");
  fa::write_npy_tensor(path, in.q);
  const auto back = fa::read_npy_tensor(path);
  CHECK(back.shape() == in.q.shape());
  CHECK(back.values() == in.q.values());
  std::remove(path.c_str());
}

TEST_CASE("LSE is written as a 3-d [B,H,Nq] array") {
  fa::HostTensor lse(fa::Shape4{1, 2, 3, 1}, 0.5f);
  const std::string path = temp_path("lse.npy");
  fa::write_npy_lse(path, lse);
  const auto a = fa::read_npy(path);
  CHECK(a.shape == std::vector<std::int64_t>{1, 2, 3});
  CHECK(a.values.size() == 6);
  std::remove(path.c_str());
}

TEST_CASE("float16 files are read and converted exactly") {
  std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 1, 1, 4), }";
  dict.append(118 - dict.size(), ' ');
  dict += '\n';
  std::string data;
  for (std::uint16_t h : {0x3C00, 0xC000, 0x3555, 0x0001}) {  // 1, -2, 0.33325, smallest subnormal
    data += static_cast<char>(h & 0xFF);
    data += static_cast<char>(h >> 8);
  }
  const std::string path = temp_path("half.npy");
  write_bytes(path, npy_header(dict) + data);
  const auto t = fa::read_npy_tensor(path);
  CHECK(t.values()[0] == 1.0f);
  CHECK(t.values()[1] == -2.0f);
  CHECK(t.values()[2] == doctest::Approx(0.33325));
  CHECK(t.values()[3] == std::ldexp(1.0f, -24));
  std::remove(path.c_str());
}

TEST_CASE("half conversion round-trips every finite half") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F) continue;  // Inf/NaN
    const float f = fa::half_to_float(static_cast<std::uint16_t>(h));
    REQUIRE(fa::float_to_half(f) == h);
  }
}

TEST_CASE("malformed and truncated files are rejected with one clear error") {
  const std::string path = temp_path("bad.npy");
  auto expect_error = [&](const std::string& bytes, const std::string& words) {
    write_bytes(path, bytes);
    try {
      fa::read_npy_tensor(path);
      FAIL("no error for a bad file, expected: " << words);
    } catch (const fa::UsageError& e) {
      const std::string msg = e.what();
      CHECK_MESSAGE(msg.find(words) != std::string::npos, msg);
      CHECK(msg.find('\n') == std::string::npos);
    }
  };
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 2, 2), }\n";
  expect_error("", "preamble");
  expect_error("not a numpy file at all", "magic");
  expect_error(npy_header(good_dict) + std::string(8, '\0'), "truncated data");
  expect_error(npy_header(good_dict) + std::string(20, '\0'), "past the data");
  expect_error(npy_header("{'descr': '<f8', 'fortran_order': False, 'shape': (1, 1, 1, 1), }\n") +
                   std::string(8, '\0'),
               "dtype");
  expect_error(npy_header("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 1, 1, 1), }\n") +
                   std::string(4, '\0'),
               "Fortran");
  expect_error(npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }\n") +
                   std::string(16, '\0'),
               "4-d");
  expect_error(npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, x, 1, 1), }\n"), "shape entry");
  expect_error(std::string("\x93NUMPY\x01\x00\xff", 9), "truncated header");
  std::remove(path.c_str());
  CHECK_THROWS_AS(fa::read_npy_tensor(temp_path("does_not_exist.npy")), fa::UsageError);
}
