// npy.cpp — the .npy reader and writer.
//
// A .npy file is the magic "\x93NUMPY", a version, the header length (uint16 LE in 1.0, uint32 LE in
// 2.0 and 3.0), the header, then the raw data. The header is a Python dict literal that NumPy reads with
// ast.literal_eval and then checks (numpy/lib/format.py). We do both, so that a file is accepted exactly
// when np.load accepts it and it holds float32 or float16 data in C order (fa/npy.hpp has the details).
// The parser reads what a header can hold, as Python 3.11 does: dicts, tuples, lists, sets; strings
// (either quote, triple quotes, u and r prefixes, escapes, 'a' 'b' joined); ints (any base, with _ and
// a sign); True, False, None; comments, newlines inside brackets, \ continuations. Refused, though
// Python reads them: floats, complex numbers, bytes, \N{...} escapes and Python 2's 3L.
#include "fa/npy.hpp"

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>

#include "fa/files.hpp"
#include "fa/problem.hpp"

namespace fa {

// '=' and '|' in a descr mean the host's byte order; the data vector is little-endian.
static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr std::uint64_t kMaxHeaderChars = 10000;  // NumPy >= 1.24's default max_header_size
constexpr std::int64_t kMaxElements = std::int64_t{1} << 40;
constexpr std::int64_t kHuge = std::int64_t{1} << 62;  // ints saturate here: a dimension that large is refused
constexpr int kMaxNesting = 200;                       // CPython: "too many nested parentheses"
constexpr std::size_t kMaxDims = 64;                   // NumPy 2's NPY_MAXDIMS

[[noreturn]] void bad(const std::string& name, const std::string& why) {
  throw UsageError(name + ": not a usable .npy file: " + why);
}

// Header text for a message: printable ASCII as is, other bytes (and ' and \) as \xNN, at most 40
// characters with the quotes, so that a message is always one clean line.
std::string quote_text(std::string_view text) {
  std::string body;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    const char hex[] = {'\\', 'x', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]};
    const bool plain = c >= 0x20 && c < 0x7F && c != '\'' && c != '\\';
    const std::string_view piece = plain ? std::string_view(&ch, 1) : std::string_view(hex, 4);
    if (body.size() + piece.size() > 35) return "'" + body + "'...";
    body += piece;
  }
  return "'" + body + "'";
}

// A value of the Python literal subset.
struct Value {
  enum class Kind { dict, tuple, list, set, str, integer, boolean, none } kind = Kind::none;
  std::string text;             // str: the decoded string, in UTF-8
  std::int64_t number = 0;      // integer: the value, saturated at +-kHuge; boolean: 0 or 1
  bool signed_literal = false;  // integer: came with a unary + or - (Python refuses -(-1))
  std::vector<Value> items;     // tuple, list, set: the elements; dict: key, value, key, value...
};

std::string kind_name(const Value& v) {
  constexpr const char* kNames[] = {"a dict", "a tuple", "a list", "a set", "a string", "an int", "a bool", "None"};
  return kNames[static_cast<int>(v.kind)];
}

bool is_name_char(char c) {  // ASCII letters and digits, _, and any non-ASCII byte
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || (c & 0x80);
}

// The value of a hex digit, else -1. c | 0x20 is c in lower case, for ASCII letters.
int hex_value(char c) {
  const int lower = c | 0x20;
  return c >= '0' && c <= '9' ? c - '0' : lower >= 'a' && lower <= 'f' ? lower - 'a' + 10 : -1;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  constexpr std::uint32_t kLead[] = {0, 0, 0xC0, 0xE0, 0xF0};  // the first byte's marker, by length
  const int n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
  out += static_cast<char>(kLead[n] | (cp >> (6 * (n - 1))));
  for (int k = n - 2; k >= 0; --k) out += static_cast<char>(0x80 | ((cp >> (6 * k)) & 0x3F));
}

// Recursive descent over the header text. Past the end, peek() is '\0', which the text cannot hold.
struct Parser {
  std::string_view s;
  const std::string& name;
  std::size_t p = 0;
  int depth = 0;  // open brackets

  [[noreturn]] void fail(const std::string& why) const { bad(name, "cannot parse the header: " + why); }
  [[noreturn]] void fail_at(std::size_t at, const std::string& why) const {
    fail(why + " at offset " + std::to_string(at) + " near " + quote_text(s.substr(at, 20)));
  }
  char peek(std::size_t ahead = 0) const { return p + ahead < s.size() ? s[p + ahead] : '\0'; }
  bool at_newline() const { return peek() == '\n' || peek() == '\r'; }
  bool at_quote(std::size_t ahead = 0) const { return peek(ahead) == '\'' || peek(ahead) == '"'; }
  bool at_string() const { return at_quote() || (std::string_view("uUrR").find(peek()) < 4 && at_quote(1)); }
  void skip_newline() { p += (peek() == '\r' && peek(1) == '\n') ? 2 : 1; }
  bool eat(char c) {  // c if it is next, and what follows it up to the next token
    if (peek() != c) return false;
    ++p;
    skip();
    return true;
  }

  Value parse_all() {
    if (s.find('\0') != std::string_view::npos) bad(name, "the header contains a NUL byte");  // as Python's compile()
    while (peek() == ' ' || peek() == '\t') ++p;  // ast.literal_eval strips these
    skip();
    if (p == s.size()) bad(name, "the header is empty");
    Value v = parse_value();
    if (p < s.size()) fail_at(p, "unexpected text after the value");
    return v;
  }

  // Skips spaces, comments, newlines and \ continuations. Python joins the lines inside brackets.
  // Outside them, later lines may only be blank or comments, and, as in CPython's tokenizer, one that
  // starts indented (or indentation at the very end) is an IndentationError.
  void skip() {
    bool new_line = false, indented = false;
    for (char c = peek();; c = peek()) {
      if (at_newline()) {
        skip_newline();
        new_line = true;
        indented = false;
      } else if (c == ' ' || c == '\t' || c == '\f') {
        ++p;
        indented = new_line && c != '\f';  // a form feed resets the column
      } else if (c == '#') {
        while (peek() != '\0' && !at_newline()) ++p;
        indented = false;  // a comment line counts as blank
      } else if (c == '\\' && (peek(1) == '\n' || peek(1) == '\r')) {
        ++p;
        skip_newline();
        if (depth == 0 && p == s.size()) fail("it ends in a line continuation");
      } else {
        break;
      }
    }
    if (depth == 0 && indented) fail_at(p, "unexpected indent");
  }

  // A value, and what follows it up to the next token.
  Value parse_value() {
    const char c = peek();
    const std::size_t start = p;
    Value v;
    if (c == '{' || c == '(' || c == '[') {
      // {k: v, ...} is a dict and {a, b} a set (Python reads it, NumPy refuses it); [...] is a list;
      // () is an empty tuple, (x) is just x, (x,) and (x, y) are tuples. A trailing comma is allowed.
      const char close = c == '{' ? '}' : c == '(' ? ')' : ']';
      v.kind = c == '{' ? Value::Kind::dict : c == '(' ? Value::Kind::tuple : Value::Kind::list;
      if (++depth > kMaxNesting) fail_at(p, "too many nested brackets");
      bool comma = false;
      eat(c);
      while (peek() != close) {
        v.items.push_back(parse_value());
        if (v.kind == Value::Kind::dict && v.items.size() == 1 && peek() != ':') v.kind = Value::Kind::set;
        if (v.kind == Value::Kind::dict && !eat(':')) fail_at(p, "expected ':' in the dict");
        if (v.kind == Value::Kind::dict) v.items.push_back(parse_value());
        if (peek() != ',' && peek() != close) fail_at(p, std::string("expected ',' or '") + close + "'");
        if (eat(',')) comma = true;
      }
      ++p;
      --depth;
      if (c == '(' && v.items.size() == 1 && !comma) v = Value(std::move(v.items[0]));
    } else if (at_string()) {
      v.kind = Value::Kind::str;
      while (at_string()) parse_string(v.text);  // adjacent literals are joined: '<' "f4" is '<f4'
    } else if (c == '+' || c == '-') {
      // As in ast.literal_eval, a sign goes only on a number: -3 and -(3), not --3, -(-3) or -True.
      eat(c);
      if (peek() == '+' || peek() == '-') fail_at(p, "a sign applies only to a number");  // and no deep recursion
      v = parse_value();
      if (v.kind != Value::Kind::integer || v.signed_literal) fail("a sign applies only to a number");
      v.number = c == '-' ? -v.number : v.number;
      v.signed_literal = true;
    } else if (c >= '0' && c <= '9') {
      // Ints as Python writes them: 0, 00, 0_0, 12, 1_000, 0x1F, 0o17, 0b101; not 007, 1__0, 1_, 0x, 3L, 3.0.
      v.kind = Value::Kind::integer;
      const int b = peek(1) | 0x20;  // ASCII lower case
      const int base = c != '0' ? 10 : b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 10;
      if (base != 10) p += 2;
      const std::size_t digits = p;
      for (;;) {
        const bool underscore = peek() == '_' && (p > digits || base != 10);  // one _, before a digit
        const int d = hex_value(peek(underscore ? 1 : 0));
        if (d < 0 || d >= base) break;
        p += underscore ? 2 : 1;
        v.number = v.number > (kHuge - d) / base ? kHuge : v.number * base + d;
      }
      if (p == digits) fail_at(p, "invalid number literal");
      if (base == 10 && c == '0' && v.number != 0) fail_at(p, "leading zeros in a decimal integer");
      if (peek() == '.' || is_name_char(peek())) fail_at(p, "unsupported number literal");
    } else if (is_name_char(c)) {
      while (is_name_char(peek())) ++p;
      const std::string_view word = s.substr(start, p - start);
      if (at_quote()) fail_at(start, "unsupported string prefix");
      if (word != "True" && word != "False" && word != "None") fail_at(start, "unexpected name");
      v.kind = word == "None" ? Value::Kind::none : Value::Kind::boolean;
      v.number = word == "True";
    } else {
      fail_at(p, p == s.size() ? "unexpected end of the header" : "unexpected character");
    }
    skip();
    return v;
  }

  // One string literal, from its u or r prefix or its quote, and what follows it up to the next token.
  void parse_string(std::string& out) {
    const bool raw = peek() == 'r' || peek() == 'R';
    if (!at_quote()) ++p;
    const std::size_t start = p;
    const char q = peek();
    const bool triple = peek(1) == q && peek(2) == q;
    p += triple ? 3 : 1;
    while (peek() != q || (triple && (peek(1) != q || peek(2) != q))) {
      if (p == s.size() || (!triple && at_newline()) || (peek() == '\\' && p + 1 == s.size()))
        fail_at(start, "unterminated string");
      if (peek() == '\\') {
        escape(out, raw);
      } else {
        out += s[p++];
      }
    }
    p += triple ? 3 : 1;
    skip();
  }

  // At a backslash: Python's escapes; an unknown one keeps its backslash ('\q' is "\\q"). In a raw
  // string every backslash stays, but it still keeps the next character from closing the string.
  void escape(std::string& out, bool raw) {
    constexpr std::string_view kFrom = "\\'\"abfnrtv", kTo = "\\'\"\a\b\f\n\r\t\v";
    ++p;
    if (!raw && at_newline()) return skip_newline();  // a line continuation inside the string
    const char c = s[p++];
    const int hex_digits = raw ? 0 : c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    const bool octal = !raw && c >= '0' && c <= '7';
    if (!raw && c == 'N') fail_at(p, "\\N{...} escapes are not supported");
    if (!raw && kFrom.find(c) != std::string_view::npos) {
      out += kTo[kFrom.find(c)];
    } else if (hex_digits > 0 || octal) {  // \xHH, \uHHHH, \UHHHHHHHH, or one to three octal digits
      std::uint32_t cp = octal ? static_cast<std::uint32_t>(c - '0') : 0;
      for (int i = 0; i < (octal ? 2 : hex_digits) && !(octal && (peek() < '0' || peek() > '7')); ++i, ++p) {
        if (hex_value(peek()) < 0) fail_at(p, "truncated \\x, \\u or \\U escape");
        cp = cp * (octal ? 8 : 16) + static_cast<std::uint32_t>(hex_value(peek()));
      }
      if (cp > 0x10FFFF) fail_at(p, "\\U escape out of range");
      append_utf8(out, cp);
    } else {
      out += {'\\', c};
    }
  }
};

// The characters of a version 3.0 header, which is UTF-8 (in 1.0 and 2.0, latin-1, a byte is one),
// decoded as strictly as Python does: no overlong forms, no surrogates, nothing past U+10FFFF.
std::size_t utf8_chars(std::string_view s, const std::string& name) {
  std::size_t chars = 0;
  for (std::size_t i = 0; i < s.size(); ++chars) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
    std::uint32_t cp = c & (0x7Fu >> len);
    std::size_t k = 1;
    for (; k < len && i + k < s.size() && (s[i + k] & 0xC0) == 0x80; ++k) cp = (cp << 6) | (s[i + k] & 0x3Fu);
    const std::uint32_t min = len == 3 ? 0x800 : len == 4 ? 0x10000 : 0;  // less is an overlong form
    if (len == 0 || k < len || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      bad(name, "the version 3.0 header is not valid UTF-8");
    i += len;
  }
  return chars;
}

// Both readers. `read(offset, count, dst, what)` copies bytes of the file, which has `size` bytes.
// The preamble, the header and the size of the data are all checked before any data is read.
template <class Read>
NpyArray read_checked(std::uint64_t size, const std::string& name, Read read) {
  std::string head(static_cast<std::size_t>(std::min<std::uint64_t>(12, size)), '\0');
  read(0, head.size(), head.data(), "the preamble");
  if (head.size() < 8)
    bad(name, "the file has " + std::to_string(head.size()) + " bytes, shorter than the 8-byte preamble");
  if (head.substr(0, 6) != "\x93NUMPY") bad(name, "missing the \\x93NUMPY magic at the start");
  const int major = static_cast<unsigned char>(head[6]), minor = static_cast<unsigned char>(head[7]);
  if (major < 1 || major > 3 || minor != 0)
    bad(name, "format version " + std::to_string(major) + "." + std::to_string(minor) +
                  " is not supported (only 1.0, 2.0 and 3.0, as NumPy)");
  const std::size_t start = major == 1 ? 10 : 12;  // the header length is a uint16 in 1.0, else a uint32
  if (head.size() < start) bad(name, "the file ends inside the header length");
  std::uint64_t len = 0;
  for (std::size_t i = 8; i < start; ++i) len |= std::uint64_t{static_cast<unsigned char>(head[i])} << (8 * (i - 8));
  // NumPy counts characters; in UTF-8 (3.0) one takes at most 4 bytes, and the exact count comes below.
  if (len > kMaxHeaderChars * (major == 3 ? 4 : 1))
    bad(name, "header length " + std::to_string(len) + " is over " + std::to_string(kMaxHeaderChars) +
                  " and may not be safe to load (as NumPy refuses it)");
  if (start + len > size)
    bad(name, "the header is " + std::to_string(len) + " bytes but the file has only " + std::to_string(size - start) +
                  " bytes after the preamble");
  std::string header(len, '\0');
  read(start, len, header.data(), "the header");
  if (major == 3 && utf8_chars(header, name) > kMaxHeaderChars)
    bad(name, "the header is over " + std::to_string(kMaxHeaderChars) + " characters and may not be safe to load");
  const NpyHeader h = parse_npy_header(header, name);
  std::uint64_t want = size_of(h.dtype);
  for (const auto d : h.shape) want *= static_cast<std::uint64_t>(d);  // parse_npy_header bounded it
  const std::uint64_t have = size - start - len;
  if (have < want)
    bad(name,
        "truncated data: the shape needs " + std::to_string(want) + " bytes, the file has " + std::to_string(have));
  if (have > want)
    bad(name, "the file has " + std::to_string(have - want) + " bytes past the " + std::to_string(want) +
                  " bytes of data its shape describes");
  NpyArray a{h.shape, h.dtype, std::vector<std::byte>(want)};
  read(start + len, want, reinterpret_cast<char*>(a.data.data()), "the data");
  const auto elem = static_cast<std::ptrdiff_t>(size_of(h.dtype));  // big-endian elements, swapped to little-endian
  for (auto it = a.data.begin(); h.big_endian && it != a.data.end(); it += elem) std::reverse(it, it + elem);
  return a;
}

}  // namespace

NpyHeader parse_npy_header(std::string_view dict_text, const std::string& name) {
  const Value d = Parser{dict_text, name}.parse_all();
  // From here on, numpy's _read_array_header, in its order.
  if (d.kind != Value::Kind::dict) bad(name, "the header is not a dictionary (it is " + kind_name(d) + ")");
  constexpr std::string_view kKeys[] = {"descr", "fortran_order", "shape"};
  const std::string keys_must = " (keys must be 'descr', 'fortran_order', 'shape')";
  const Value* found[3] = {};  // a repeated key: the last one wins, as in Python
  for (std::size_t i = 0; i + 1 < d.items.size(); i += 2) {
    const Value& key = d.items[i];
    const auto k = std::find(std::begin(kKeys), std::end(kKeys), key.text) - std::begin(kKeys);
    if (key.kind != Value::Kind::str) bad(name, "the header has a key that is " + kind_name(key) + keys_must);
    if (k == 3) bad(name, "the header has the unexpected key " + quote_text(key.text) + keys_must);
    found[k] = &d.items[i + 1];
  }
  for (int k = 0; k < 3; ++k)
    if (!found[k]) bad(name, "the header has no '" + std::string(kKeys[k]) + "' key");
  const Value &descr = *found[0], &fortran = *found[1], &shape = *found[2];

  // Python's bool is an int and format.py lets (True, 3) through, but np.load then refuses it
  // (NumPy takes no bool as a dimension): refused here too.
  if (shape.kind != Value::Kind::tuple)
    bad(name, "shape is not valid: it is " + kind_name(shape) + ", not a tuple of ints");
  for (const Value& dim : shape.items)
    if (dim.kind != Value::Kind::integer)
      bad(name, "shape is not valid: it holds " + kind_name(dim) + ", not only ints");
  if (fortran.kind != Value::Kind::boolean) bad(name, "fortran_order is not a valid bool: it is " + kind_name(fortran));
  if (fortran.number != 0) bad(name, "Fortran order is not supported; save with C order");
  if (descr.kind != Value::Kind::str)
    bad(name, "descr is " + kind_name(descr) + ": structured dtypes are not supported (use float32 or float16)");
  const std::string& t = descr.text;  // '<f4', '=f4', '|f4', '>f4', or the same with f2
  if (t.size() != 3 || std::string_view("<=|>").find(t[0]) > 3 || (t.substr(1) != "f4" && t.substr(1) != "f2"))
    bad(name, "dtype " + quote_text(t) + " is not supported (use float32 '<f4' or float16 '<f2')");
  NpyHeader h;
  h.dtype = t[2] == '2' ? DType::float16 : DType::float32;
  h.big_endian = t[0] == '>';

  // What np.empty would then refuse, and our own bound on the size, checked before any allocation.
  if (shape.items.size() > kMaxDims)
    bad(name,
        "the shape has " + std::to_string(shape.items.size()) + " dimensions, more than " + std::to_string(kMaxDims));
  std::int64_t nonzero_product = 1;  // as NumPy, zero dimensions do not hide an overflow in the others
  for (const Value& dim : shape.items) {
    if (dim.number < 0) bad(name, "the shape has a negative dimension");
    if (dim.number > 0 && nonzero_product > kMaxElements / dim.number)
      bad(name, "the shape has more than 2^40 elements");
    nonzero_product *= std::max<std::int64_t>(dim.number, 1);
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
  return read_checked(bytes.size(), name, [&](std::uint64_t at, std::uint64_t count, char* dst, const char*) {
    std::copy_n(bytes.data() + at, count, dst);
  });
}

NpyArray read_npy(const std::string& path) {
  require_regular_file(path, "");  // a FIFO would block, a device never end
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) throw UsageError(path + ": cannot open file");
  return read_checked(size, path, [&](std::uint64_t at, std::uint64_t count, char* dst, const char* what) {
    in.seekg(static_cast<std::streamoff>(at));
    if (!in.read(dst, static_cast<std::streamsize>(count))) bad(path, std::string("read error in ") + what);
  });
}

void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const float* values) {
  std::string dims;  // as np.save writes the shape: (), (3,), (2, 3)
  std::int64_t count = 1;
  for (const auto d : shape) {
    dims += (dims.empty() ? "" : ", ") + std::to_string(d);
    count *= d;
  }
  std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + (shape.size() == 1 ? ",), }" : "), }");
  dict += std::string((64 - (10 + dict.size() + 1) % 64) % 64, ' ') + '\n';  // the data starts on a 64-byte boundary
  write_file_checked(path, "", [&](std::ostream& out) {
    out.write("\x93NUMPY\x01\x00", 8);  // format 1.0, then the header length as a uint16 LE
    out << static_cast<char>(dict.size() & 0xFF) << static_cast<char>(dict.size() >> 8) << dict;
    out.write(reinterpret_cast<const char*>(values), count * static_cast<std::streamsize>(sizeof(float)));
  });
}

}  // namespace fa
