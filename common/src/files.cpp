// Files read and written by the stages, checked (fa/files.hpp).
#include "fa/files.hpp"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>

#include "fa/problem.hpp"

namespace fa {

namespace {

const char* kind_of(std::filesystem::file_type type) {
  switch (type) {
    case std::filesystem::file_type::directory: return "a folder";
    case std::filesystem::file_type::fifo: return "a FIFO";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    case std::filesystem::file_type::socket: return "a socket";
    default: return "not a regular file";
  }
}

// The start of a message: "--json out.json" or, with no flag, the path alone.
std::string named(const std::string& what, const std::string& path) { return what.empty() ? path : what + " " + path; }

// errno's text, when an open or a write set it.
std::string reason() { return errno ? std::string(" (") + std::strerror(errno) + ")" : ""; }

}  // namespace

void require_regular_file(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found || ec)
    throw UsageError(named(what, path) + ": cannot open file" + (ec ? " (" + ec.message() + ")" : ""));
  if (st.type() != std::filesystem::file_type::regular)
    throw UsageError(named(what, path) + ": is " + kind_of(st.type()) + "; only regular files are read");
}

void require_writable_kind(const std::string& path, const std::string& what) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (st.type() == std::filesystem::file_type::not_found) return;
  if (ec) throw UsageError(named(what, path) + ": " + ec.message());
  if (st.type() != std::filesystem::file_type::regular)
    throw UsageError(named(what, path) + ": is " + kind_of(st.type()) + "; only regular files are written");
}

std::string read_small_file(const std::string& path, std::uint64_t max_bytes, const std::string& what) {
  require_regular_file(path, what);
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) throw UsageError(named(what, path) + ": cannot read its size (" + ec.message() + ")");
  if (size > max_bytes)
    throw UsageError(named(what, path) + ": " + std::to_string(size) + " bytes, more than the " +
                     std::to_string(max_bytes) + " such a file can need");
  std::ifstream in(path, std::ios::binary);
  std::string text(static_cast<std::size_t>(size), '\0');
  // Exactly the size seen above (a file growing meanwhile is read no further).
  if (!in || !in.read(text.data(), static_cast<std::streamsize>(size)))
    throw UsageError(named(what, path) + ": read error");
  return text;
}

void write_file_checked(const std::string& path, const std::string& what,
                        const std::function<void(std::ostream&)>& write) {
  require_writable_kind(path, what);
  errno = 0;
  std::ofstream out(path, std::ios::binary);
  if (!out) throw UsageError(named(what, path) + ": cannot open for writing" + reason());
  write(out);
  out.flush();  // the buffered tail is written here, and a full disk reported here or at close
  const bool written = static_cast<bool>(out);
  out.close();
  if (!written || out.fail()) throw UsageError(named(what, path) + ": write failed" + reason());
}

}  // namespace fa
