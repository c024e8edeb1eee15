#include <doctest/doctest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "fa/dtype.hpp"
#include "fa/files.hpp"
#include "fa/npy.hpp"
#include "fa/problem.hpp"

namespace {

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("fa_test_" + name)).string();
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A .npy file: preamble for `major`.0 (or an explicit minor), the dict text as given, then data.
std::string npy_file(const std::string& dict, const std::string& data = "", int major = 1, int minor = 0) {
  std::string h = "\x93NUMPY";
  h += static_cast<char>(major);
  h += static_cast<char>(minor);
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  for (std::size_t i = 0; i < len_bytes; ++i) h += static_cast<char>((dict.size() >> (8 * i)) & 0xFF);
  return h + dict + data;
}

std::string float_bytes(const std::vector<float>& v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

std::vector<float> as_floats(const fa::NpyArray& a) {
  REQUIRE(a.dtype == fa::DType::float32);
  std::vector<float> v(a.data.size() / 4);
  std::memcpy(v.data(), a.data.data(), a.data.size());
  return v;
}

// A refusal must be a UsageError whose message is one clean line naming the file.
void expect_refused(const std::string& bytes, const std::string& words) {
  try {
    fa::read_npy_bytes(bytes, "test.npy");
    FAIL("no error, expected one saying: " << words);
  } catch (const fa::UsageError& e) {
    const std::string msg = e.what();
    CHECK_MESSAGE(msg.find(words) != std::string::npos, msg);
    CHECK_MESSAGE(msg.rfind("test.npy: not a usable .npy file: ", 0) == 0, msg);
    bool clean = true;
    for (const char c : msg) clean = clean && c >= 0x20 && c < 0x7F;
    CHECK_MESSAGE(clean, msg);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

const std::string kGood = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
const std::string kSixFloats = float_bytes({1, 2, 3, 4, 5, 6});

}  // namespace

TEST_CASE(".npy float32 round trip keeps shape and every bit") {
  std::vector<float> values(2 * 3 * 5 * 7);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = std::sin(static_cast<float>(i)) * 1e-3f;
  values[3] = -0.0f;
  values[4] = std::nextafter(0.0f, 1.0f);  // a subnormal
  const std::string path = temp_path("roundtrip.npy");
  fa::write_npy(path, {2, 3, 5, 7}, values.data());
  const auto back = fa::read_npy(path);
  CHECK(back.shape == std::vector<std::int64_t>{2, 3, 5, 7});
  CHECK(back.dtype == fa::DType::float32);
  CHECK(back.numel() == 210);
  REQUIRE(back.data.size() == values.size() * sizeof(float));
  CHECK(std::memcmp(back.data.data(), values.data(), back.data.size()) == 0);
  // The header is np.save's: the data starts on a 64-byte boundary.
  CHECK((std::filesystem::file_size(path) - back.data.size()) % 64 == 0);
  std::remove(path.c_str());
}

TEST_CASE("write_npy writes 1-d and 0-d shapes as Python tuples") {
  const std::string path = temp_path("shapes.npy");
  const std::vector<float> v{1, 2, 3};
  fa::write_npy(path, {3}, v.data());
  CHECK(fa::read_npy(path).shape == std::vector<std::int64_t>{3});
  fa::write_npy(path, {}, v.data());
  const auto scalar = fa::read_npy(path);
  CHECK(scalar.shape.empty());
  CHECK(scalar.numel() == 1);
  CHECK(as_floats(scalar) == std::vector<float>{1});
  std::remove(path.c_str());
}

TEST_CASE("float16 files are read as float16 bytes, exactly") {
  std::string dict = "{'descr': '<f2', 'fortran_order': False, 'shape': (1, 1, 1, 4), }";
  dict.append(117 - dict.size(), ' ');
  dict += '\n';
  std::string data;
  const std::uint16_t halves[] = {0x3C00, 0xC000, 0x3555, 0x0001};  // 1, -2, 0.33325, smallest subnormal
  for (std::uint16_t h : halves) {
    data += static_cast<char>(h & 0xFF);
    data += static_cast<char>(h >> 8);
  }
  const std::string path = temp_path("half.npy");
  write_bytes(path, npy_file(dict, data));
  const auto a = fa::read_npy(path);
  CHECK(a.dtype == fa::DType::float16);
  CHECK(a.shape == std::vector<std::int64_t>{1, 1, 1, 4});
  REQUIRE(a.data.size() == 8);
  std::uint16_t back[4];
  std::memcpy(back, a.data.data(), 8);
  CHECK(fa::half_to_float(back[0]) == 1.0f);
  CHECK(fa::half_to_float(back[1]) == -2.0f);
  CHECK(fa::half_to_float(back[2]) == doctest::Approx(0.33325));
  CHECK(fa::half_to_float(back[3]) == std::ldexp(1.0f, -24));
  std::remove(path.c_str());
}

TEST_CASE("half conversion round-trips every finite half") {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1F) == 0x1F) continue;  // Inf/NaN
    const float f = fa::half_to_float(static_cast<std::uint16_t>(h));
    REQUIRE(fa::float_to_half(f) == h);
  }
}

TEST_CASE("headers that NumPy accepts are accepted") {
  const std::vector<std::string> dicts = {
      kGood,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(50, ' ') + "\n",
      "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
      "{'descr':\n\t'<f4',\n 'fortran_order' :False ,'shape':(\n2,\n3\n)\n}\n",
      "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}",
      "{'descr': '=f4', 'fortran_order': False, 'shape': (2, 3,),}",
      "{'descr': '|f4', 'fortran_order': False, 'shape': (6,)}",
      "{'descr': '<f4', # a comment\n 'fortran_order': False, 'shape': (2, 3)}  # and one after\n",
      "{'descr': '<' 'f4', 'fortran_order': False, 'shape': (2, 3)}",   // implicit concatenation
      "{'descr': '\\x3cf4', 'fortran_order': False, 'shape': (2, 3)}",  // an escape
      "{u'descr': r'<f4', 'fortran_order': False, 'shape': (+2, 3)}",
      "{'descr': '<f8', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}",  // the last wins
      "{'descr': '<f4', 'fortran_order': False, 'shape': ((2, 3))}",               // parenthesised
      "{'descr': '<f4', 'fortran_order': False, 'shape': (0b10, 0o3)}",            // other bases
      "\n# leading comment\n{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}\n\n  \n",
  };
  for (const auto& dict : dicts) {
    CAPTURE(dict);
    for (int major : {1, 2, 3}) {
      const auto a = fa::read_npy_bytes(npy_file(dict, kSixFloats, major), "test.npy");
      CHECK(a.numel() == 6);
      CHECK(as_floats(a) == std::vector<float>{1, 2, 3, 4, 5, 6});
    }
  }
}

TEST_CASE("big-endian data is byte-swapped") {
  std::string data;
  for (float f : {1.5f, -2.0f, 3.25f}) {
    const std::string le = float_bytes({f});
    data += std::string(le.rbegin(), le.rend());
  }
  const auto a = fa::read_npy_bytes(
      npy_file("{'descr': '>f4', 'fortran_order': False, 'shape': (3,)}", data), "test.npy");
  CHECK(as_floats(a) == std::vector<float>{1.5f, -2.0f, 3.25f});

  const auto h = fa::read_npy_bytes(
      npy_file("{'descr': '>f2', 'fortran_order': False, 'shape': (1,)}", std::string("\x3c\x00", 2)), "test.npy");
  CHECK(h.dtype == fa::DType::float16);
  std::uint16_t bits = 0;
  std::memcpy(&bits, h.data.data(), 2);
  CHECK(bits == 0x3C00);
}

TEST_CASE("the header dict is checked as NumPy checks it") {
  const auto h = fa::parse_npy_header("{'descr': '>f2', 'fortran_order': False, 'shape': ()}", "x");
  CHECK(h.dtype == fa::DType::float16);
  CHECK(h.big_endian);
  CHECK(h.shape.empty());
  CHECK(fa::parse_npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 5)}", "x").shape ==
        std::vector<std::int64_t>{0, 5});
  // A 0-d array has one element, a shape with a zero dimension none.
  CHECK(fa::read_npy_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': ()}", float_bytes({7})), "x")
            .numel() == 1);
  const auto empty = fa::read_npy_bytes(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0)}"), "x");
  CHECK(empty.numel() == 0);
  CHECK(empty.data.empty());
}

TEST_CASE("headers and files that NumPy refuses are refused with one clean line") {
  const std::string tail = ", 'fortran_order': False, 'shape': (2, 3)}";
  auto with_shape = [](const std::string& shape) {
    return npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + "}", kSixFloats);
  };
  expect_refused("", "preamble");
  expect_refused("not a numpy file at all", "magic");
  expect_refused(npy_file(kGood, kSixFloats, 1, 1), "version 1.1");
  expect_refused(npy_file(kGood, kSixFloats, 4), "version 4.0");
  expect_refused(npy_file(kGood, kSixFloats, 0), "version 0.0");
  expect_refused(npy_file("['descr', '<f4']", kSixFloats), "not a dictionary");
  expect_refused(npy_file("'<f4'", kSixFloats), "not a dictionary");
  expect_refused(npy_file("{'descr', 'fortran_order', 'shape'}", kSixFloats), "not a dictionary");  // a set
  expect_refused(npy_file("{'descr': '<f4', 'shape': (2, 3)}", kSixFloats), "no 'fortran_order'");
  expect_refused(npy_file("{'descr': '<f4', 'extra': 1" + tail, kSixFloats), "unexpected key 'extra'");
  expect_refused(npy_file("{1: '<f4'" + tail, kSixFloats), "key that is an int");
  expect_refused(npy_file(kGood + "x", kSixFloats), "after the value");
  expect_refused(npy_file(kGood + "}", kSixFloats), "after the value");
  expect_refused(npy_file(kGood + "\n  ", kSixFloats), "unexpected indent");  // as CPython
  expect_refused(with_shape("(2.5,)"), "number");
  expect_refused(with_shape("[2, 3]"), "shape is not valid");
  expect_refused(with_shape("(2, '3')"), "shape is not valid");
  expect_refused(with_shape("(2, None)"), "shape is not valid");
  expect_refused(with_shape("(True, 6)"), "shape is not valid");  // np.load refuses a bool dimension
  expect_refused(with_shape("(False,)"), "shape is not valid");
  expect_refused(with_shape("6"), "shape is not valid");
  expect_refused(with_shape("(-1,)"), "negative");
  expect_refused(with_shape("(-(-6),)"), "sign");
  expect_refused(with_shape("(--6,)"), "sign");
  expect_refused(with_shape("(-True,)"), "sign");
  expect_refused(with_shape("(007,)"), "leading zeros");
  expect_refused(with_shape("(1__0,)"), "number");
  expect_refused(with_shape("(0x,)"), "number");
  expect_refused(with_shape("(0b12,)"), "number");
  expect_refused(with_shape("(6L,)"), "number");
  expect_refused(with_shape("(1048576, 1048576, 2)"), "2^40");
  expect_refused(with_shape("(99999999999999999999999999999,)"), "2^40");
  expect_refused(with_shape("(0, 99999999999999999999999999999)"), "2^40");
  expect_refused(with_shape("(65536, 65536, 65536, 65536, 65536)"), "2^40");
  expect_refused(with_shape("(" + std::string(201, '(') + "6," + std::string(201, ')') + ")"), "nested");
  expect_refused(npy_file("{'descr': '<f4', 'fortran_order': 1, 'shape': (2, 3)}", kSixFloats), "not a valid bool");
  expect_refused(npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3)}", kSixFloats), "Fortran order is not supported");
  expect_refused(npy_file("{'descr': '<f4, 'fortran_order': False, 'shape': (2, 3)}", kSixFloats), "");
  expect_refused(npy_file("{'descr': '<f4" + std::string(60, ' '), kSixFloats), "unterminated string");
  expect_refused(npy_file("{'descr': '<f4\n', 'fortran_order': False, 'shape': (2, 3)}", kSixFloats), "unterminated string");
  expect_refused(npy_file("{'descr': '<f8'" + tail, kSixFloats), "dtype '<f8' is not supported");
  expect_refused(npy_file("{'descr': '<i4'" + tail, kSixFloats), "dtype '<i4' is not supported");
  expect_refused(npy_file("{'descr': '<f4\\x0a\\x93'" + tail, kSixFloats), "dtype '<f4\\x0a\\xc2\\x93' is not");
  expect_refused(npy_file("{'descr': [('a', '<f4')]" + tail, kSixFloats), "structured");
  expect_refused(npy_file("{'descr': b'<f4'" + tail, kSixFloats), "string prefix");
  expect_refused(npy_file("{'descr': '<f4'" + tail + std::string("\0", 1), kSixFloats), "NUL");
  expect_refused(npy_file(kGood + std::string(10001 - kGood.size(), ' '), kSixFloats), "10000");
  expect_refused(npy_file(kGood, kSixFloats, 3).replace(8, 4, std::string("\xff\xff\xff\x7f", 4)), "10000");
  expect_refused(npy_file(kGood, kSixFloats).replace(8, 2, std::string("\x00\x10", 2)), "the file has only");
  expect_refused(npy_file(kGood, kSixFloats.substr(0, 20)), "truncated data: the shape needs 24 bytes, the file has 20");
  expect_refused(npy_file(kGood, kSixFloats + "xy"), "2 bytes past the 24 bytes");
  expect_refused(std::string("\x93NUMPY\x01\x00\xff", 9), "inside the header length");
  expect_refused(npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x\xff\x01\\n\x1b[31m': 0}", kSixFloats),
                 "unexpected key 'x\\xff\\x01\\x0a\\x1b[31m'");
  // Invalid UTF-8 in a version 3.0 header (latin-1 in 1.0, where any byte is a character).
  const std::string latin = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} # \xe9\n";
  CHECK(fa::read_npy_bytes(npy_file(latin, kSixFloats, 1), "x").numel() == 6);
  expect_refused(npy_file(latin, kSixFloats, 3), "UTF-8");
}

TEST_CASE("quoted header text is escaped and cut to 40 characters") {
  try {
    fa::read_npy_bytes(npy_file("{'descr': '" + std::string(100, '\x01') + "'" +
                                ", 'fortran_order': False, 'shape': (2, 3)}", kSixFloats), "t");
    FAIL("accepted");
  } catch (const fa::UsageError& e) {
    const std::string msg = e.what();
    const auto open = msg.find('\'');
    const auto close = msg.find("'...", open + 1);
    REQUIRE(close != std::string::npos);
    CHECK(close + 4 - open <= 40);
  }
}

TEST_CASE("read_npy checks the header and the size before reading the data") {
  const std::string path = temp_path("bad.npy");
  write_bytes(path, "");
  CHECK_THROWS_AS(fa::read_npy(path), fa::UsageError);
  // A huge file (sparse, so nothing is written) whose size does not match its header.
  write_bytes(path, npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (268435456,)}"));
  std::error_code ec;
  std::filesystem::resize_file(path, 2ull << 30, ec);
  if (!ec) {
    try {
      fa::read_npy(path);
      FAIL("accepted");
    } catch (const fa::UsageError& e) {
      CHECK(std::string(e.what()).find("past the 1073741824 bytes") != std::string::npos);
    }
    write_bytes(path, npy_file("{'descr': '<f4', 'fortran_order': True, 'shape': (268435456,)}"));
    std::filesystem::resize_file(path, 2ull << 30, ec);
    CHECK_THROWS_WITH_AS(fa::read_npy(path), doctest::Contains("Fortran"), fa::UsageError);
  } else {
    MESSAGE("no sparse file here: " << ec.message());
  }
  std::remove(path.c_str());
  CHECK_THROWS_AS(fa::read_npy(temp_path("does_not_exist.npy")), fa::UsageError);
  CHECK_THROWS_AS(fa::read_npy(std::filesystem::temp_directory_path().string()), fa::UsageError);
}

TEST_CASE("only regular files are read or written: a FIFO or a device is refused, not waited on") {
  const std::string fifo = temp_path("fifo.npy");
  std::remove(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(fa::read_npy(fifo), doctest::Contains("FIFO"), fa::UsageError);
  const float one = 1.0f;
  CHECK_THROWS_WITH_AS(fa::write_npy(fifo, {1}, &one), doctest::Contains("FIFO"), fa::UsageError);
  std::remove(fifo.c_str());
  CHECK_THROWS_WITH_AS(fa::read_npy("/dev/zero"), doctest::Contains("character device"), fa::UsageError);
  CHECK_THROWS_WITH_AS(fa::write_npy("/dev/full", {1}, &one), doctest::Contains("character device"), fa::UsageError);
  CHECK_THROWS_WITH_AS(fa::read_small_file("/dev/zero", 100, "--load"), doctest::Contains("--load /dev/zero"),
                       fa::UsageError);
}

TEST_CASE("a write counts only once flushed and closed without error") {
  const std::string path = temp_path("checked.txt");
  fa::write_file_checked(path, "--json", [](std::ostream& out) { out << "ok\n"; });
  CHECK(fa::read_small_file(path, 100, "--json") == "ok\n");
  CHECK_THROWS_WITH_AS(fa::read_small_file(path, 2, "--json"), doctest::Contains("more than"), fa::UsageError);
  // A stream that fails on the way (as on a full disk) is an error, not "written".
  CHECK_THROWS_WITH_AS(fa::write_file_checked(path, "--json", [](std::ostream& out) { out.setstate(std::ios::badbit); }),
                       doctest::Contains(": write failed"), fa::UsageError);
  std::remove(path.c_str());
}

TEST_CASE("a shape with a zero dimension reads as an empty tensor, without touching a null buffer") {
  const fa::HostTensor t = [] {
    const std::string path = temp_path("empty.npy");
    write_bytes(path, npy_file("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 0, 8)}"));
    fa::HostTensor read = fa::read_npy_tensor(path);
    std::remove(path.c_str());
    return read;
  }();
  CHECK(t.numel() == 0);
}
