// files.hpp — the files a stage reads and writes, checked so that bad ones end in one line.
//
// Only regular files (or links to them) are read or written: a FIFO would block the open or the
// read forever, and a device (/dev/zero, /dev/full) has no end or takes nothing. Reads are bounded
// (by a .npy header's size, or a limit the caller gives), and a write counts only once the data is
// flushed and the file closed without error. Every failure is a UsageError naming the path.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>

namespace fa {

// Throws UsageError unless `path` is a regular file (following links). `what` starts the message
// ("--load", "--json"...).
void require_regular_file(const std::string& path, const std::string& what);

// Throws UsageError if `path` exists and is not a regular file; a missing one will be created.
void require_writable_kind(const std::string& path, const std::string& what);

// The whole of a small text file, at most `max_bytes` (more is refused, not cut).
std::string read_small_file(const std::string& path, std::uint64_t max_bytes, const std::string& what);

// Opens `path` for writing (a regular file or a new one), lets `write` fill it, then flushes and
// closes it: any failure on the way (a full disk, /dev/full) is a UsageError "PATH: write failed".
void write_file_checked(const std::string& path, const std::string& what, const std::function<void(std::ostream&)>& write);

}  // namespace fa
