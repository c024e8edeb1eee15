#include "fa/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace fa {

const char* to_string(Pass pass) { return pass == Pass::forward ? "fwd" : "bwd"; }

namespace {

// The length of the well-formed UTF-8 sequence that starts text[i] (Unicode's table 3-7: no
// overlong forms, no surrogates, nothing past U+10FFFF), or 0 where the bytes are not one.
std::size_t utf8_length(std::string_view text, std::size_t i) {
  const auto at = [&](std::size_t k) { return i + k < text.size() ? static_cast<unsigned char>(text[i + k]) : 0u; };
  const unsigned c = at(0);
  const auto tail = [&](std::size_t k) { return at(k) >= 0x80 && at(k) <= 0xBF; };
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) return tail(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    const unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    return at(1) >= lo && at(1) <= hi && tail(2) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    const unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    return at(1) >= lo && at(1) <= hi && tail(2) && tail(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

std::string one_line(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto hex = [&out](unsigned char b) { out += {'\\', 'x', "0123456789abcdef"[b >> 4], "0123456789abcdef"[b & 15]}; };
  for (std::size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const std::size_t length = utf8_length(text, i);
    // A byte that is no well-formed UTF-8 (a lone 0x9B is CSI to a terminal in an 8-bit mode) and
    // the C1 controls U+0080..U+009F (0xC2 0x80..0x9F: CSI, OSC...) are escaped byte by byte.
    const bool c1 = length == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) <= 0x9F;
    if (length == 0 || c1) {
      for (std::size_t k = 0; k < std::max<std::size_t>(length, 1); ++k) hex(static_cast<unsigned char>(text[i + k]));
      i += std::max<std::size_t>(length, 1);
    } else if (c < 0x20 || c == 0x7F) {
      hex(c);
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

float Problem::softmax_scale() const {
  return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(dim));
}

std::int64_t Problem::keys_visible(std::int64_t i) const {
  if (!causal) return seq_k;
  return std::clamp<std::int64_t>(i + causal_offset() + 1, 0, seq_k);
}

double Problem::visible_pairs_per_head() const {
  if (!causal) return static_cast<double>(seq_q) * static_cast<double>(seq_k);
  // Rows i < Nq - Nk see nothing; row i sees min(i + Nk - Nq + 1, Nk) keys: a closed form, so
  // that a problem of 10^9 rows costs no loop.
  const double nq = static_cast<double>(seq_q), nk = static_cast<double>(seq_k);
  // Row i sees i - (Nq - Nk) + 1 keys (never more than Nk, since i < Nq), or none.
  const double first_seeing = std::max(0.0, nq - nk);          // the first row that sees a key
  const double rows = nq - first_seeing;                        // rows that see at least one key
  const double first_count = first_seeing - (nq - nk) + 1.0;   // keys seen by the first of them
  return rows * first_count + rows * (rows - 1.0) / 2.0;
}

std::int64_t Problem::total_tokens() const {
  if (!packed()) return batch * seq_q;
  std::int64_t total = 0;
  for (std::int64_t len : seq_lens) total += len;
  return total;
}

std::vector<std::int64_t> Problem::cu_seqlens() const {
  std::vector<std::int64_t> cu{0};
  for (std::int64_t len : seq_lens) cu.push_back(cu.back() + len);
  return cu;
}

Problem packed_problem(Problem base, std::vector<std::int64_t> seq_lens) {
  if (seq_lens.empty()) throw UsageError("--seq-lens: a packed batch needs at least one sequence");
  for (std::int64_t len : seq_lens)
    if (len < 1) throw UsageError("--seq-lens: every length must be at least 1, got " + std::to_string(len));
  base.batch = static_cast<std::int64_t>(seq_lens.size());
  base.seq_q = base.seq_k = *std::max_element(seq_lens.begin(), seq_lens.end());
  base.seq_lens = std::move(seq_lens);
  return base;
}

double Problem::flops_forward() const {
  if (packed()) {  // each sequence as its own problem: L_s queries against its L_s keys
    double sum = 0.0;
    Problem one = *this;
    one.seq_lens.clear();
    one.batch = 1;
    for (std::int64_t len : seq_lens) {
      one.seq_q = one.seq_k = len;
      sum += one.flops_forward();
    }
    return sum;
  }
  const double full = 4.0 * batch * heads * static_cast<double>(seq_q) * seq_k * dim;
  if (!causal) return full;
  if (seq_q == seq_k) return 0.5 * full;  // the papers' convention for square causal attention
  return 4.0 * batch * heads * visible_pairs_per_head() * dim;
}

double Problem::bytes_io(Pass pass) const {
  const double e = static_cast<double>(size_of(dtype));
  const double q = static_cast<double>(q_elements()), kv = static_cast<double>(kv_elements());
  const double lse = 4.0 * static_cast<double>(lse_elements());
  if (pass == Pass::forward) return e * (2 * q + 2 * kv) + lse;  // Q, K, V, O, LSE
  return e * (4 * q + 4 * kv) + lse;                             // and dO, dQ, dK, dV
}

double Problem::bytes_min(Pass pass) const { return bytes_io(pass); }

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " H=" << heads;
  if (kv_heads() != heads) s << " Hkv=" << kv_heads();
  if (packed()) {
    s << " packed N=";
    for (std::size_t i = 0; i < seq_lens.size() && i < 8; ++i) s << (i ? "," : "") << seq_lens[i];
    if (seq_lens.size() > 8) s << ",... (" << total_tokens() << " tokens)";
  } else if (seq_q == seq_k) {
    s << " N=" << seq_q;
  } else {
    s << " Nq=" << seq_q << " Nk=" << seq_k;
  }
  s << " D=" << dim << (causal ? " causal" : "");
  if (dtype != DType::float32) s << " " << to_string(dtype);
  return s.str();
}

namespace {

// a·b·c·... without overflow: false when the product passes 2^62.
bool product_fits(std::initializer_list<std::int64_t> factors, std::int64_t& out) {
  constexpr std::int64_t kMax = std::int64_t{1} << 62;
  out = 1;
  for (std::int64_t f : factors) {
    if (f != 0 && out > kMax / f) return false;
    out *= f;
  }
  return true;
}

}  // namespace

void Problem::validate() const {
  auto positive = [](std::int64_t v, const char* name) {
    if (v < 1) throw UsageError(std::string(name) + " must be at least 1, got " + std::to_string(v));
  };
  positive(batch, "--batch");
  positive(heads, "--heads");
  positive(seq_q, "--seq-q");
  positive(seq_k, "--seq-k");
  positive(dim, "--dim");
  if (heads_kv < 0 || (heads_kv > 0 && heads % heads_kv != 0))
    throw UsageError("--heads " + std::to_string(heads) + " must be a multiple of --heads-kv " +
                     std::to_string(heads_kv));
  if (!std::isfinite(scale) || scale < 0.0f)
    throw UsageError("--scale must be a positive finite number (or 0 for 1/sqrt(D))");
  std::int64_t n = 0;
  if (!product_fits({batch, heads, seq_q, dim}, n) || !product_fits({batch, kv_heads(), seq_k, dim}, n))
    throw UsageError("B·H·N·D (" + std::to_string(batch) + "·" + std::to_string(heads) + "·" +
                     std::to_string(std::max(seq_q, seq_k)) + "·" + std::to_string(dim) +
                     ") elements do not fit 64-bit sizes");
  if (!product_fits({batch, heads, seq_q, seq_k}, n))
    throw UsageError("B·H·Nq·Nk (" + std::to_string(batch) + "·" + std::to_string(heads) + "·" +
                     std::to_string(seq_q) + "·" + std::to_string(seq_k) + ") does not fit 64-bit sizes");
  for (std::int64_t len : seq_lens) positive(len, "--seq-lens");
  if (packed()) {  // packed_problem() makes them agree; anything else is a bug in the caller
    const std::int64_t longest = *std::max_element(seq_lens.begin(), seq_lens.end());
    if (batch != static_cast<std::int64_t>(seq_lens.size()) || seq_q != longest || seq_k != longest)
      throw UsageError("a packed batch needs B = the number of --seq-lens and Nq = Nk = the longest (" +
                       std::to_string(seq_lens.size()) + " and " + std::to_string(longest) + "), got B = " +
                       std::to_string(batch) + ", Nq = " + std::to_string(seq_q) + ", Nk = " + std::to_string(seq_k));
    if (!product_fits({heads, total_tokens(), dim}, n) || !product_fits({heads, longest, longest}, n))
      throw UsageError("the packed batch's sizes do not fit 64-bit arithmetic");
  }
}

void Problem::require(const Supports& s) const {
  validate();
  if (std::find(s.dtypes.begin(), s.dtypes.end(), dtype) == s.dtypes.end()) {
    std::string names;
    for (DType t : s.dtypes) names += (names.empty() ? "" : ", ") + std::string(to_string(t));
    throw UsageError(std::string("--dtype ") + to_string(dtype) + " is not supported by this stage (it runs " + names + ")");
  }
  if (!s.has_dim(dim)) {
    std::string dims;
    for (auto d : s.dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    throw UsageError("D = " + std::to_string(dim) + " is not supported (supported: " + dims + ")");
  }
  if (kv_heads() != heads && !s.grouped_heads)
    throw UsageError("grouped-query heads (Hkv = " + std::to_string(kv_heads()) + " < Hq = " +
                     std::to_string(heads) + ") are not supported by this stage; give --heads-kv equal to --heads");
  if (!seq_lens.empty() && !s.variable_lengths)
    throw UsageError("packed variable-length batches (--seq-lens) are not supported by this stage");
}

}  // namespace fa
