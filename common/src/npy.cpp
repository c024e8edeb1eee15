// npy.cpp — the .npy reader and writer (see fa/npy.hpp for what is accepted and refused).
//
// A .npy file is: the magic "\x93NUMPY", a major and a minor version byte, the header length
// (uint16 LE for 1.0, uint32 LE for 2.0 and 3.0), the header, then the raw data. The header is the
// text of a Python dict literal, which NumPy reads with ast.literal_eval and then checks
// (numpy/lib/format.py: read_magic, _check_version, _read_array_header, descr_to_dtype). We mirror
// that with a small recursive-descent parser for the part of Python's literal syntax that a
// header can use, so that hand-edited or foreign headers are judged as NumPy judges them, and
// never by searching the text for substrings.
//
// Python literal syntax we parse (as Python 3.11 does): dicts, tuples, lists and sets (the last
// two parse, but are refused where they appear); strings in ' or " quotes, triple-quoted, with the
// u and r prefixes, escapes and implicit concatenation ('<' 'f4'); integers (decimal with _
// separators, hex, octal, binary) with a unary + or -; True, False, None; whitespace, newlines
// inside brackets, comments and backslash continuations. Not parsed (refused, though Python
// would read them): floats, complex numbers, byte strings, \N{...} escapes, and Python 2 long
// literals (3L, which NumPy strips from version 1.0/2.0 headers). The parser was checked against
// ast.literal_eval on 300 000 mutated headers: the same verdict and shape on all but \N{...}.
#include "fa/npy.hpp"

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>

#include "fa/problem.hpp"

namespace fa {

// '=' and '|' in a descr mean the host's byte order; the data vector is little-endian.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr std::uint64_t kMaxHeaderChars = 10000;          // NumPy >= 1.24's default max_header_size
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
constexpr int kMaxNesting = 200;                          // CPython: "too many nested parentheses"
constexpr std::size_t kMaxDims = 64;                      // NumPy 2's NPY_MAXDIMS
constexpr std::string_view kMagic = "\x93NUMPY";

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw UsageError(name + ": not a usable .npy file: " + why);
}

// Header text for an error message: printable ASCII as is, other bytes as \xNN, at most 40
// characters in all, so that a message is always one clean line.
std::string quote_text(std::string_view text) {
  constexpr std::size_t kMax = 40;
  std::string body;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    std::string piece;
    if (c >= 0x20 && c < 0x7F && c != '\'' && c != '\\') {
      piece = ch;
    } else {
      constexpr char hex[] = "0123456789abcdef";
      piece = {'\\', 'x', hex[c >> 4], hex[c & 15]};
    }
    if (body.size() + piece.size() > kMax - 5) return "'" + body + "'...";  // 40 at most
    body += piece;
  }
  return "'" + body + "'";
}

// --- A value of the Python literal subset -------------------------------------------------------

struct Value {
  enum class Kind { dict, tuple, list, set, str, integer, boolean, none };
  Kind kind = Kind::none;
  std::string text;           // str: the decoded string
  std::int64_t number = 0;    // integer: the value, saturated at +-kHuge; boolean: 0 or 1
  bool huge = false;          // integer: |value| > kHuge (Python ints are unbounded)
  bool signed_literal = false;  // integer: came from a unary + or - (Python refuses -(-1))
  std::vector<Value> items;   // tuple, list, set: the elements; dict: key, value, key, value...
};

constexpr std::int64_t kHuge = std::int64_t{1} << 62;

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::dict: return "a dict";
    case Value::Kind::tuple: return "a tuple";
    case Value::Kind::list: return "a list";
    case Value::Kind::set: return "a set";
    case Value::Kind::str: return "a string";
    case Value::Kind::integer: return "an int";
    case Value::Kind::boolean: return "a bool";
    case Value::Kind::none: return "None";
  }
  return "?";
}

bool is_name_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || u >= 0x80;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Recursive descent over the header text. Python joins lines inside brackets, so there any
// whitespace, newline and comment may separate tokens; at the top level a newline ends the one
// logical line that ast.literal_eval (mode 'eval') allows, and what follows may only be blank or
// comment lines.
class Parser {
 public:
  Parser(std::string_view text, const std::string& name) : s_(text), name_(name) {}

  Value parse_all() {
    if (s_.find('\0') != std::string_view::npos) fail("the header contains a NUL byte");  // as Python's compile()
    // ast.literal_eval strips leading spaces and tabs; after that, blank and comment lines may
    // come first, but the line with the value must not be indented.
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;
    skip_top_level();
    if (p_ >= s_.size()) fail("the header is empty");
    Value v = parse_value();
    skip_top_level();
    if (p_ < s_.size()) fail_here("unexpected text after the value");
    return v;
  }

 private:
  std::string_view s_;
  const std::string& name_;
  std::size_t p_ = 0;
  int depth_ = 0;  // open brackets

  [[noreturn]] void fail(const std::string& why) const { bad(name_, why); }
  [[noreturn]] void fail_here(const std::string& why) const {
    fail("cannot parse the header: " + why + " at offset " + std::to_string(p_) + " near " +
         quote_text(s_.substr(std::min(p_, s_.size()), 20)));
  }

  char peek(std::size_t ahead = 0) const { return p_ + ahead < s_.size() ? s_[p_ + ahead] : '\0'; }
  bool at_end() const { return p_ >= s_.size(); }
  bool at_newline() const { return peek() == '\n' || peek() == '\r'; }
  void skip_newline() { p_ += (peek() == '\r' && peek(1) == '\n') ? 2 : 1; }
  bool at_continuation() const {  // a backslash that ends the physical line
    return peek() == '\\' && (peek(1) == '\n' || peek(1) == '\r');
  }
  void skip_comment() {
    while (!at_end() && !at_newline()) ++p_;
  }

  // Between tokens inside a logical line.
  void skip_space() {
    for (;;) {
      if (depth_ > 0 && at_newline()) {
        skip_newline();
      } else if (peek() == ' ' || peek() == '\t' || peek() == '\f') {
        ++p_;
      } else if (depth_ > 0 && peek() == '#') {
        skip_comment();
      } else if (at_continuation()) {
        ++p_;
        skip_newline();
        if (depth_ == 0 && at_end()) fail("cannot parse the header: it ends in a line continuation");
      } else {
        return;
      }
    }
  }

  // Outside all brackets: spaces, comments, newlines. Mirrors CPython's tokenizer on indentation:
  // a new logical line that starts indented is an IndentationError unless it is blank or a
  // comment, and so is trailing indentation at the very end of the text.
  void skip_top_level() {
    bool new_line = false;  // at the start of a logical line (after a newline)
    bool indented = false;
    for (;;) {
      if (at_newline()) {
        skip_newline();
        new_line = true;
        indented = false;
      } else if (peek() == ' ' || peek() == '\t') {
        ++p_;
        if (new_line) indented = true;
      } else if (peek() == '\f') {
        ++p_;
        if (new_line) indented = false;  // a form feed resets the column, as in CPython
      } else if (peek() == '#') {
        skip_comment();
        indented = false;  // a comment line counts as blank
      } else if (at_continuation()) {
        ++p_;
        skip_newline();
        if (at_end()) fail("cannot parse the header: it ends in a line continuation");
      } else {
        break;
      }
    }
    if (new_line && indented) fail_here("unexpected indent");
  }

  void open_bracket() {
    if (++depth_ > kMaxNesting) fail_here("too many nested brackets");
    ++p_;
    skip_space();
  }

  Value parse_value() {
    const char c = peek();
    if (c == '{') return parse_dict_or_set();
    if (c == '(') return parse_paren();
    if (c == '[') {
      Value v;
      v.kind = Value::Kind::list;
      parse_items(v, ']');
      return v;
    }
    if (c == '\'' || c == '"') return parse_strings(false);
    if (c >= '0' && c <= '9') return parse_int();
    if (c == '+' || c == '-') return parse_signed();
    if (is_name_char(c)) return parse_name();
    if (at_end()) fail_here("unexpected end of the header");
    fail_here("unexpected character");
  }

  // Elements up to `close`, commas between, a trailing comma allowed; the opening bracket is next.
  void parse_items(Value& v, char close) {
    open_bracket();
    while (peek() != close) {
      v.items.push_back(parse_value());
      skip_space();
      if (peek() == ',') {
        ++p_;
        skip_space();
      } else if (peek() != close) {
        fail_here(std::string("expected ',' or '") + close + "'");
      }
    }
    ++p_;
    --depth_;
  }

  // {} is an empty dict; {k: v, ...} a dict; {a, b} a set (Python reads it; NumPy then refuses).
  Value parse_dict_or_set() {
    Value v;
    v.kind = Value::Kind::dict;
    open_bracket();
    bool first = true;
    while (peek() != '}') {
      Value key = parse_value();
      skip_space();
      if (first && peek() != ':') v.kind = Value::Kind::set;
      first = false;
      v.items.push_back(std::move(key));
      if (v.kind == Value::Kind::dict) {
        if (peek() != ':') fail_here("expected ':' in the dict");
        ++p_;
        skip_space();
        v.items.push_back(parse_value());
        skip_space();
      }
      if (peek() == ',') {
        ++p_;
        skip_space();
      } else if (peek() != '}') {
        fail_here("expected ',' or '}'");
      }
    }
    ++p_;
    --depth_;
    return v;
  }

  // () is an empty tuple, (x) is just x, (x,) and (x, y) are tuples.
  Value parse_paren() {
    open_bracket();
    Value v;
    v.kind = Value::Kind::tuple;
    if (peek() == ')') {
      ++p_;
      --depth_;
      return v;
    }
    Value first = parse_value();
    skip_space();
    if (peek() == ')') {
      ++p_;
      --depth_;
      return first;
    }
    if (peek() != ',') fail_here("expected ',' or ')'");
    ++p_;
    skip_space();
    v.items.push_back(std::move(first));
    while (peek() != ')') {
      v.items.push_back(parse_value());
      skip_space();
      if (peek() == ',') {
        ++p_;
        skip_space();
      } else if (peek() != ')') {
        fail_here("expected ',' or ')'");
      }
    }
    ++p_;
    --depth_;
    return v;
  }

  // ast.literal_eval takes + or - only directly on a number literal: -3 and -(3), not --3 or -True.
  Value parse_signed() {
    const bool minus = peek() == '-';
    ++p_;
    skip_space();
    if (peek() == '+' || peek() == '-') fail_here("a sign applies only to a number");  // and no deep recursion
    Value v = parse_value();
    if (v.kind != Value::Kind::integer || v.signed_literal)
      fail("cannot parse the header: a sign applies only to a number");
    if (minus) v.number = -v.number;
    v.signed_literal = true;
    return v;
  }

  // Integers as Python writes them: 0, 00, 0_0, 12, 1_000, 0x1F, 0o17, 0b101; not 007, 1__0, 1_, 0x.
  Value parse_int() {
    Value v;
    v.kind = Value::Kind::integer;
    int base = 10;
    if (peek() == '0') {
      const char b = peek(1);
      base = (b == 'x' || b == 'X') ? 16 : (b == 'o' || b == 'O') ? 8 : (b == 'b' || b == 'B') ? 2 : 10;
      if (base != 10) p_ += 2;
    }
    const char first = peek();
    bool digits = false, nonzero = false;
    for (;;) {
      // Python allows one '_' before any digit of a prefixed literal, and between decimal digits.
      const bool underscore = peek() == '_' && (digits || base != 10);
      const int d = digit_value(peek(underscore ? 1 : 0));
      if (d < 0 || d >= base) break;
      p_ += underscore ? 2 : 1;
      digits = true;
      nonzero = nonzero || d != 0;
      if (v.number > (kHuge - d) / base) {
        v.huge = true;
        v.number = kHuge;
      } else {
        v.number = v.number * base + d;
      }
    }
    if (!digits) fail_here("invalid number literal");
    if (base == 10 && first == '0' && nonzero) fail_here("leading zeros in a decimal integer");
    // 3.0, 3e2, 3j, 3L, 1_, 0x1g: floats, complex numbers or invalid literals.
    if (peek() == '.' || is_name_char(peek())) fail_here("unsupported number literal");
    return v;
  }

  static int digit_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  Value parse_name() {
    const std::size_t start = p_;
    while (is_name_char(peek())) ++p_;
    const std::string_view word = s_.substr(start, p_ - start);
    if (peek() == '\'' || peek() == '"') {  // a string prefix
      if (word == "u" || word == "U") return parse_strings(false);
      if (word == "r" || word == "R") return parse_strings(true);
      p_ = start;
      fail_here("unsupported string prefix");
    }
    Value v;
    if (word == "True" || word == "False") {
      v.kind = Value::Kind::boolean;
      v.number = word == "True" ? 1 : 0;
    } else if (word == "None") {
      v.kind = Value::Kind::none;
    } else {
      p_ = start;
      fail_here("unexpected name");
    }
    return v;
  }

  // One string literal, then any adjacent ones: Python concatenates 'a' "b" into 'ab'.
  Value parse_strings(bool raw) {
    Value v;
    v.kind = Value::Kind::str;
    parse_string(v.text, raw);
    for (;;) {
      skip_space();
      const char c = peek();
      bool next_raw = false;
      if ((c == 'u' || c == 'U' || c == 'r' || c == 'R') && (peek(1) == '\'' || peek(1) == '"')) {
        next_raw = c == 'r' || c == 'R';
        ++p_;
      } else if (c != '\'' && c != '"') {
        return v;
      }
      parse_string(v.text, next_raw);
    }
  }

  void parse_string(std::string& out, bool raw) {
    const std::size_t start = p_;
    const char q = peek();
    const bool triple = peek(1) == q && peek(2) == q;
    p_ += triple ? 3 : 1;
    for (;;) {
      if (at_end()) {
        p_ = start;
        fail_here("unterminated string");
      }
      const char c = peek();
      if (c == q && (!triple || (peek(1) == q && peek(2) == q))) {
        p_ += triple ? 3 : 1;
        return;
      }
      if (!triple && at_newline()) {
        p_ = start;
        fail_here("unterminated string");
      }
      if (c == '\\') {
        if (p_ + 1 >= s_.size()) {
          p_ = start;
          fail_here("unterminated string");
        }
        if (raw) {  // the backslash stays, but still keeps the next character from closing the string
          out += c;
          out += s_[p_ + 1];
          p_ += 2;
        } else {
          ++p_;
          escape(out);
        }
        continue;
      }
      out += c;
      ++p_;
    }
  }

  // After the backslash. Python's escapes; an unknown one keeps its backslash ('\q' is "\\q").
  void escape(std::string& out) {
    const char c = peek();
    if (at_newline()) {  // a line continuation inside the string
      skip_newline();
      return;
    }
    ++p_;
    switch (c) {
      case '\\': out += '\\'; return;
      case '\'': out += '\''; return;
      case '"': out += '"'; return;
      case 'a': out += '\a'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'v': out += '\v'; return;
      case 'x': append_utf8(out, hex_escape(2)); return;
      case 'u': append_utf8(out, hex_escape(4)); return;
      case 'U': {
        const std::uint32_t cp = hex_escape(8);
        if (cp > 0x10FFFF) fail_here("\\U escape out of range");
        append_utf8(out, cp);
        return;
      }
      case 'N': fail_here("\\N{...} escapes are not supported");
      default: break;
    }
    if (c >= '0' && c <= '7') {  // up to three octal digits
      std::uint32_t cp = static_cast<std::uint32_t>(c - '0');
      for (int i = 0; i < 2 && peek() >= '0' && peek() <= '7'; ++i, ++p_) cp = cp * 8 + static_cast<std::uint32_t>(peek() - '0');
      append_utf8(out, cp);
      return;
    }
    out += '\\';
    out += c;
  }

  std::uint32_t hex_escape(int digits) {
    std::uint32_t cp = 0;
    for (int i = 0; i < digits; ++i, ++p_) {
      const int d = digit_value(peek());
      if (d < 0) fail_here("truncated \\x, \\u or \\U escape");
      cp = cp * 16 + static_cast<std::uint32_t>(d);
    }
    return cp;
  }
};

// The text of a version 3.0 header is UTF-8 (1.0 and 2.0 are latin-1, where every byte is a
// character). Python's strict decoder refuses overlong forms, surrogates and code points past
// U+10FFFF; so do we. Returns the number of characters.
std::size_t utf8_chars(std::string_view s, const std::string& name) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); ++chars) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t len = 1;
    std::uint32_t cp = c;
    if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0x80) bad(name, "the version 3.0 header is not valid UTF-8");
    if (i + len > s.size()) bad(name, "the version 3.0 header is not valid UTF-8");
    for (std::size_t k = 1; k < len; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) bad(name, "the version 3.0 header is not valid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      bad(name, "the version 3.0 header is not valid UTF-8");
    i += len;
  }
  return chars;
}

// What the fixed-size start of the file says.
struct Preamble {
  int major = 1;
  std::uint64_t header_start = 10;  // offset of the header text
  std::uint64_t header_len = 0;
};

// `head` is the first 12 bytes of the file, or all of it if shorter. Checks the magic, the
// version (numpy's _check_version), and that the header is of a safe length and inside the file.
Preamble read_preamble(std::string_view head, std::uint64_t file_size, const std::string& name) {
  if (head.size() < 8)
    bad(name, "the file has " + std::to_string(head.size()) + " bytes, shorter than the 8-byte preamble");
  if (head.substr(0, 6) != kMagic) bad(name, "missing the \\x93NUMPY magic at the start");
  Preamble pre;
  pre.major = static_cast<unsigned char>(head[6]);
  const int minor = static_cast<unsigned char>(head[7]);
  if (pre.major < 1 || pre.major > 3 || minor != 0)
    bad(name, "format version " + std::to_string(pre.major) + "." + std::to_string(minor) +
                  " is not supported (only 1.0, 2.0 and 3.0, as NumPy)");
  const std::size_t len_bytes = pre.major == 1 ? 2 : 4;
  pre.header_start = 8 + len_bytes;
  if (head.size() < pre.header_start) bad(name, "the file ends inside the header length");
  for (std::size_t i = 0; i < len_bytes; ++i)
    pre.header_len |= std::uint64_t{static_cast<unsigned char>(head[8 + i])} << (8 * i);
  // NumPy counts characters; in UTF-8 (version 3.0) a character takes at most 4 bytes, so the
  // exact count is taken once the header is read.
  const std::uint64_t max_bytes = kMaxHeaderChars * (pre.major == 3 ? 4 : 1);
  if (pre.header_len > max_bytes)
    bad(name, "header length " + std::to_string(pre.header_len) + " is over " + std::to_string(kMaxHeaderChars) +
                  " and may not be safe to load (as NumPy refuses it)");
  if (pre.header_start + pre.header_len > file_size)
    bad(name, "the header is " + std::to_string(pre.header_len) + " bytes but the file has only " +
                  std::to_string(file_size - pre.header_start) + " bytes after the preamble");
  return pre;
}

NpyHeader read_header(std::string_view header, int major, const std::string& name) {
  if (major == 3 && utf8_chars(header, name) > kMaxHeaderChars)
    bad(name, "the header is over " + std::to_string(kMaxHeaderChars) + " characters and may not be safe to load");
  return parse_npy_header(header, name);
}

std::uint64_t element_count(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const auto d : shape) n *= static_cast<std::uint64_t>(d);  // parse_npy_header bounded it
  return n;
}

// The data size the header asks for, checked against what the file has.
std::uint64_t check_data_size(const NpyHeader& h, std::uint64_t have, const std::string& name) {
  const std::uint64_t want = element_count(h.shape) * size_of(h.dtype);
  if (have < want)
    bad(name, "truncated data: the shape needs " + std::to_string(want) + " bytes, the file has " + std::to_string(have));
  if (have > want)
    bad(name, "the file has " + std::to_string(have - want) + " bytes past the " + std::to_string(want) +
                  " bytes of data its shape describes");
  return want;
}

void swap_to_little(NpyArray& a, bool big_endian) {
  if (!big_endian) return;
  const std::size_t elem = size_of(a.dtype);
  for (std::size_t i = 0; i + elem <= a.data.size(); i += elem) std::reverse(a.data.begin() + static_cast<std::ptrdiff_t>(i), a.data.begin() + static_cast<std::ptrdiff_t>(i + elem));
}

}  // namespace

NpyHeader parse_npy_header(std::string_view dict_text, const std::string& name) {
  const Value d = Parser(dict_text, name).parse_all();

  // From here on, numpy's _read_array_header, in its order.
  if (d.kind != Value::Kind::dict) bad(name, std::string("the header is not a dictionary (it is ") + kind_name(d.kind) + ")");
  const Value* descr = nullptr;
  const Value* fortran = nullptr;
  const Value* shape = nullptr;
  for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) {  // a repeated key: the last one wins, as in Python
    const Value& key = d.items[i];
    const Value* value = &d.items[i + 1];
    if (key.kind == Value::Kind::str && key.text == "descr") descr = value;
    else if (key.kind == Value::Kind::str && key.text == "fortran_order") fortran = value;
    else if (key.kind == Value::Kind::str && key.text == "shape") shape = value;
    else if (key.kind == Value::Kind::str)
      bad(name, "the header has the unexpected key " + quote_text(key.text) + " (keys must be 'descr', 'fortran_order', 'shape')");
    else
      bad(name, std::string("the header has a key that is ") + kind_name(key.kind) + " (keys must be 'descr', 'fortran_order', 'shape')");
  }
  if (!descr) bad(name, "the header has no 'descr' key");
  if (!fortran) bad(name, "the header has no 'fortran_order' key");
  if (!shape) bad(name, "the header has no 'shape' key");

  // Python's bool is an int, so NumPy takes True and False as dimensions 1 and 0; so do we.
  if (shape->kind != Value::Kind::tuple) bad(name, std::string("shape is not valid: it is ") + kind_name(shape->kind) + ", not a tuple of ints");
  for (const Value& dim : shape->items)
    if (dim.kind != Value::Kind::integer && dim.kind != Value::Kind::boolean)
      bad(name, std::string("shape is not valid: it holds ") + kind_name(dim.kind) + ", not only ints");
  if (fortran->kind != Value::Kind::boolean)
    bad(name, std::string("fortran_order is not a valid bool: it is ") + kind_name(fortran->kind));
  if (fortran->number != 0) bad(name, "Fortran order is not supported; save with C order");

  NpyHeader h;
  if (descr->kind != Value::Kind::str)
    bad(name, std::string("descr is ") + kind_name(descr->kind) + ": structured dtypes are not supported (use float32 or float16)");
  const std::string& t = descr->text;
  if (t == "<f4" || t == "=f4" || t == "|f4" || t == ">f4") h.dtype = DType::float32;
  else if (t == "<f2" || t == "=f2" || t == "|f2" || t == ">f2") h.dtype = DType::float16;
  else bad(name, "dtype " + quote_text(t) + " is not supported (use float32 '<f4' or float16 '<f2')");
  h.big_endian = t[0] == '>';

  // What np.empty would then refuse, and our own bound on the size, checked before any allocation.
  if (shape->items.size() > kMaxDims)
    bad(name, "the shape has " + std::to_string(shape->items.size()) + " dimensions, more than " + std::to_string(kMaxDims));
  std::int64_t nonzero_product = 1;  // as NumPy, zero dimensions do not hide an overflow in the others
  for (const Value& dim : shape->items) {
    if (dim.number < 0) bad(name, "the shape has a negative dimension");
    if (dim.huge || (dim.number > 0 && nonzero_product > kMaxElements / dim.number))
      bad(name, "the shape has more than 2^40 elements");
    if (dim.number > 0) nonzero_product *= dim.number;
    h.shape.push_back(dim.number);
  }
  return h;
}

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (const auto d : shape) n *= d;
  return n;
}

NpyArray read_npy_bytes(std::string_view bytes, const std::string& name) {
  const Preamble pre = read_preamble(bytes.substr(0, 12), bytes.size(), name);
  const NpyHeader h = read_header(bytes.substr(pre.header_start, pre.header_len), pre.major, name);
  const std::uint64_t data_start = pre.header_start + pre.header_len;
  const std::uint64_t want = check_data_size(h, bytes.size() - data_start, name);
  NpyArray a;
  a.shape = h.shape;
  a.dtype = h.dtype;
  a.data.resize(want);
  std::copy_n(reinterpret_cast<const std::byte*>(bytes.data() + data_start), want, a.data.begin());
  swap_to_little(a, h.big_endian);
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::error_code ec;
  const std::uint64_t file_size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) throw UsageError(path + ": cannot open file");
  // Only the preamble and the header are read before the size checks.
  std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(12, file_size)), '\0');
  if (!in.read(head.data(), static_cast<std::streamsize>(head.size()))) bad(path, "read error in the preamble");
  const Preamble pre = read_preamble(head, file_size, path);
  std::string header(pre.header_len, '\0');
  in.seekg(static_cast<std::streamoff>(pre.header_start));
  if (!in.read(header.data(), static_cast<std::streamsize>(header.size()))) bad(path, "read error in the header");
  const NpyHeader h = read_header(header, pre.major, path);
  const std::uint64_t data_start = pre.header_start + pre.header_len;
  const std::uint64_t want = check_data_size(h, file_size - data_start, path);

  NpyArray a;
  a.shape = h.shape;
  a.dtype = h.dtype;
  a.data.resize(want);
  if (!in.read(reinterpret_cast<char*>(a.data.data()), static_cast<std::streamsize>(want))) bad(path, "read error in the data");
  swap_to_little(a, h.big_endian);
  return a;
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* values) {
  // The header np.save writes: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
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
  out.write(reinterpret_cast<const char*>(values), static_cast<std::streamsize>(count * static_cast<std::int64_t>(sizeof(float))));
  if (!out) throw UsageError(path + ": write failed");
}

}  // namespace fa
