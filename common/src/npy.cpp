#include "fa/npy.hpp"

#include <bit>
#include <cstring>
#include <fstream>
#include <sstream>

#include "fa/problem.hpp"

namespace fa {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw UsageError(path + ": not a usable .npy file: " + why);
}

// Finds 'key': value in the header dict and returns the raw value text.
std::string header_value(const std::string& header, const std::string& key, const std::string& path) {
  const std::string pattern = "'" + key + "'";
  const auto at = header.find(pattern);
  if (at == std::string::npos) bad(path, "header has no " + pattern);
  auto pos = header.find(':', at + pattern.size());
  if (pos == std::string::npos) bad(path, "header entry " + pattern + " has no value");
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  if (pos >= header.size()) bad(path, "header entry " + pattern + " is cut off");
  if (header[pos] == '\'') {
    const auto end = header.find('\'', pos + 1);
    if (end == std::string::npos) bad(path, "unterminated string in header");
    return header.substr(pos + 1, end - pos - 1);
  }
  if (header[pos] == '(') {
    const auto end = header.find(')', pos);
    if (end == std::string::npos) bad(path, "unterminated shape tuple in header");
    return header.substr(pos + 1, end - pos - 1);
  }
  auto end = pos;
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  return header.substr(pos, end - pos);
}

std::vector<std::int64_t> parse_shape(const std::string& text, const std::string& path) {
  std::vector<std::int64_t> shape;
  std::string item;
  std::stringstream ss(text);
  while (std::getline(ss, item, ',')) {
    const auto first = item.find_first_not_of(' ');
    if (first == std::string::npos) continue;  // the trailing comma of a 1-tuple
    const auto last = item.find_last_not_of(' ');
    const std::string digits = item.substr(first, last - first + 1);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos)
      bad(path, "shape entry '" + digits + "' is not a non-negative integer");
    if (digits.size() > 12) bad(path, "shape entry " + digits + " is too large");
    shape.push_back(std::stoll(digits));
  }
  return shape;
}

}  // namespace

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exp = (h >> 10) & 0x1Fu;
  std::uint32_t mant = h & 0x3FFu;
  std::uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal half: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3FFu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

std::uint16_t float_to_half(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t exp = (x >> 23) & 0xFFu;
  std::uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return sign | 0x7C00u | (mant ? 0x200u : 0u);  // Inf or NaN
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return sign | 0x7C00u;                               // overflow to Inf
  if (e <= 0) {                                                     // subnormal or zero
    if (e < -10) return sign;
    mant |= 0x800000u;
    const int shift = 14 - e;
    std::uint32_t half_mant = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return sign | static_cast<std::uint16_t>(half_mant);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // round to nearest even
  return sign | static_cast<std::uint16_t>(half);
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open file");
  char magic[8];
  if (!in.read(magic, 8)) bad(path, "shorter than the 8-byte preamble");
  if (std::memcmp(magic, "\x93NUMPY", 6) != 0) bad(path, "missing the \\x93NUMPY magic");
  const int major = static_cast<unsigned char>(magic[6]);
  std::uint64_t header_len = 0;
  if (major == 1) {
    unsigned char len[2];
    if (!in.read(reinterpret_cast<char*>(len), 2)) bad(path, "truncated header length");
    header_len = len[0] | (len[1] << 8);
  } else if (major == 2 || major == 3) {
    unsigned char len[4];
    if (!in.read(reinterpret_cast<char*>(len), 4)) bad(path, "truncated header length");
    header_len = len[0] | (len[1] << 8) | (len[2] << 16) | (static_cast<std::uint64_t>(len[3]) << 24);
  } else {
    bad(path, "unknown format version " + std::to_string(major));
  }
  if (header_len > (1u << 20)) bad(path, "header length " + std::to_string(header_len) + " is implausible");
  std::string header(header_len, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(header_len))) bad(path, "truncated header");

  NpyArray a;
  a.dtype = header_value(header, "descr", path);
  const std::string order = header_value(header, "fortran_order", path);
  if (order.find("False") == std::string::npos) bad(path, "Fortran order is not supported; save with C order");
  a.shape = parse_shape(header_value(header, "shape", path), path);

  std::size_t elem = 0;
  if (a.dtype == "<f4" || a.dtype == "=f4" || (a.dtype == "|f4")) elem = 4;
  else if (a.dtype == "<f2" || a.dtype == "=f2") elem = 2;
  else bad(path, "dtype '" + a.dtype + "' is not supported (use little-endian float32 or float16)");

  std::int64_t count = 1;
  for (auto d : a.shape) {
    if (d != 0 && count > (std::int64_t{1} << 40) / d) bad(path, "shape is too large");
    count *= d;
  }
  const std::uint64_t want = static_cast<std::uint64_t>(count) * elem;
  in.seekg(0, std::ios::end);
  const std::uint64_t end = static_cast<std::uint64_t>(in.tellg());
  const std::uint64_t data_start = (major == 1 ? 10 : 12) + header_len;
  if (end < data_start + want)
    bad(path, "truncated data: expected " + std::to_string(want) + " bytes, found " +
                  std::to_string(end - data_start));
  if (end > data_start + want)
    bad(path, "has " + std::to_string(end - data_start - want) + " bytes past the data its shape describes");
  in.seekg(static_cast<std::streamoff>(data_start));
  a.values.resize(static_cast<std::size_t>(count));
  if (elem == 4) {
    in.read(reinterpret_cast<char*>(a.values.data()), static_cast<std::streamsize>(want));
  } else {
    std::vector<std::uint16_t> halves(static_cast<std::size_t>(count));
    in.read(reinterpret_cast<char*>(halves.data()), static_cast<std::streamsize>(want));
    for (std::size_t i = 0; i < halves.size(); ++i) a.values[i] = half_to_float(halves[i]);
  }
  if (!in) bad(path, "read error in the data");
  return a;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* values) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  std::int64_t count = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    dict += (shape.size() == 1 || i + 1 < shape.size()) ? "," : "";
    if (i + 1 < shape.size()) dict += " ";
    count *= shape[i];
  }
  dict += "), }";
  // Pad with spaces so that the data starts on a 64-byte boundary, newline last (format 1.0).
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UsageError(path + ": cannot open for writing");
  const unsigned char preamble[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                      static_cast<unsigned char>(dict.size() & 0xFF),
                                      static_cast<unsigned char>(dict.size() >> 8)};
  out.write(reinterpret_cast<const char*>(preamble), 10);
  out.write(dict.data(), static_cast<std::streamsize>(dict.size()));
  out.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(count * sizeof(float)));
  if (!out) throw UsageError(path + ": write failed");
}

HostTensor read_npy_tensor(const std::string& path) {
  NpyArray a = read_npy(path);
  if (a.shape.size() != 4) {
    std::string s;
    for (auto d : a.shape) s += (s.empty() ? "" : ",") + std::to_string(d);
    throw UsageError(path + ": expected a 4-d [B,H,N,D] array, got shape (" + s + ")");
  }
  HostTensor t(Shape4{a.shape[0], a.shape[1], a.shape[2], a.shape[3]});
  t.values() = std::move(a.values);
  return t;
}

void write_npy_tensor(const std::string& path, const HostTensor& t) {
  const Shape4 s = t.shape();
  write_npy(path, {s.b, s.h, s.n, s.d}, t.data());
}

void write_npy_lse(const std::string& path, const HostTensor& lse) {
  const Shape4 s = lse.shape();
  write_npy(path, {s.b, s.h, s.n}, lse.data());
}

}  // namespace fa
