// chart.hpp — a terminal table and a terminal chart.
//
// The chart puts one bar per series at each N, on a log scale (memory and time span decades),
// and ends with each series' measured growth exponent: memory that grows as N² reads "N^2.00".
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace fa {

struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  void print(std::ostream& os) const;
};

struct Series {
  std::string label;                                // "01 eigen (previous)"
  std::vector<std::pair<double, double>> points;    // (N, value); values <= 0 are not drawn
};

enum class ChartUnit { bytes, milliseconds, tflops };

void print_chart(std::ostream& os, const std::string& title, ChartUnit unit,
                 const std::vector<Series>& series, int width = 48);

// Slope of log(value) against log(N) between the two largest N (the growth exponent there).
double growth_exponent(const Series& s);

std::string format_value(double v, ChartUnit unit);

}  // namespace fa
