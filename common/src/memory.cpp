#include "fa/memory.hpp"

#include <cstdio>

namespace fa {

void MemoryMeter::on_alloc(std::int64_t bytes) {
  if (limit_ > 0 && current_ + bytes > limit_)
    throw OutOfMemory("allocation of " + format_bytes(static_cast<double>(bytes)) +
                      " would pass the memory limit of " + format_bytes(static_cast<double>(limit_)));
  current_ += bytes;
  ++allocations_;
  if (current_ > peak_) peak_ = current_;
}

void MemoryMeter::on_free(std::int64_t bytes) { current_ -= bytes; }

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (bytes >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

}  // namespace fa
