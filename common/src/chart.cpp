#include "fa/chart.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "fa/memory.hpp"

namespace fa {

void Table::print(std::ostream& os) const {
  std::vector<std::size_t> width(header.size(), 0);
  for (std::size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& r : rows)
    for (std::size_t c = 0; c < r.size() && c < width.size(); ++c) width[c] = std::max(width[c], r[c].size());
  auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t c = 0; c < width.size(); ++c) {
      const std::string cell = c < cells.size() ? cells[c] : "";
      os << (c ? "  " : "  ") << cell << std::string(width[c] - cell.size(), ' ');
    }
    os << "\n";
  };
  line(header);
  std::vector<std::string> rule;
  for (auto w : width) rule.emplace_back(w, '-');
  line(rule);
  for (const auto& r : rows) line(r);
}

std::string format_value(double v, ChartUnit unit) {
  char buf[32];
  switch (unit) {
    case ChartUnit::bytes: return format_bytes(v);
    case ChartUnit::milliseconds:
      if (v < 1.0) std::snprintf(buf, sizeof buf, "%.3f ms", v);
      else if (v < 100.0) std::snprintf(buf, sizeof buf, "%.2f ms", v);
      else std::snprintf(buf, sizeof buf, "%.0f ms", v);
      return buf;
    case ChartUnit::tflops:
      std::snprintf(buf, sizeof buf, "%.2f TFLOP/s", v);
      return buf;
  }
  return "?";
}

double growth_exponent(const Series& s) {
  std::vector<std::pair<double, double>> pts;
  for (const auto& p : s.points)
    if (p.first > 0 && p.second > 0) pts.push_back(p);
  if (pts.size() < 2) return NAN;
  std::sort(pts.begin(), pts.end());
  // The slope between the two largest sizes: how it grows where N is large, after fixed costs
  // (a tile, a buffer) stop mattering.
  const auto& a = pts[pts.size() - 2];
  const auto& b = pts.back();
  if (a.first == b.first) return NAN;
  return std::log(b.second / a.second) / std::log(b.first / a.first);
}

void print_chart(std::ostream& os, const std::string& title, ChartUnit unit,
                 const std::vector<Series>& series, int width) {
  const char marks[] = {'#', '=', '+', '*', '%', '@'};
  double lo = INFINITY, hi = 0.0;
  std::map<double, std::vector<std::pair<std::size_t, double>>> by_n;
  for (std::size_t s = 0; s < series.size(); ++s)
    for (const auto& [n, v] : series[s].points) {
      by_n[n].emplace_back(s, v);
      if (v > 0) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  os << "\n" << title << " (log scale)\n";
  if (!(hi > 0)) {
    os << "  (nothing measured)\n";
    return;
  }
  // Bars start one decade below the smallest value so that the smallest bar is still visible.
  const double floor_log = std::log10(lo) - 1.0;
  const double span = std::max(std::log10(hi) - floor_log, 1e-9);
  std::size_t label_w = 0;
  for (const auto& s : series) label_w = std::max(label_w, s.label.size());
  for (const auto& [n, entries] : by_n) {
    bool first = true;
    for (const auto& [s, v] : entries) {
      char nbuf[24];
      std::snprintf(nbuf, sizeof nbuf, "N=%-8.0f", n);
      os << "  " << (first ? nbuf : "          ") << " " << series[s].label
         << std::string(label_w - series[s].label.size(), ' ') << " |";
      if (v > 0) {
        const int len = std::max(1, static_cast<int>(std::lround(width * (std::log10(v) - floor_log) / span)));
        os << std::string(static_cast<std::size_t>(len), marks[s % sizeof marks]) << " " << format_value(v, unit);
      } else {
        os << " " << format_value(0.0, unit) << (unit == ChartUnit::bytes ? " (nothing beyond inputs and outputs)" : "");
      }
      os << "\n";
      first = false;
    }
  }
  for (const auto& s : series) {
    const double e = growth_exponent(s);
    if (std::isfinite(e)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "grows as N^%.2f at the largest N", e);
      os << "  " << s.label << std::string(label_w - s.label.size(), ' ') << "  " << buf << "\n";
    }
  }
}

}  // namespace fa
