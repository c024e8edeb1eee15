#include <doctest/doctest.h>

#include <cmath>
#include <sstream>

#include "fa/chart.hpp"

TEST_CASE("growth exponent reads N^2 and N^1 off measured points") {
  fa::Series quad{"quad", {{512, 4.0}, {1024, 16.0}, {2048, 64.0}}};
  fa::Series lin{"lin", {{512, 3.0}, {2048, 12.0}}};
  CHECK(fa::growth_exponent(quad) == doctest::Approx(2.0));
  CHECK(fa::growth_exponent(lin) == doctest::Approx(1.0));
  CHECK(std::isnan(fa::growth_exponent(fa::Series{"one", {{512, 1.0}}})));
}

TEST_CASE("the chart prints one bar per series and size, and the exponent") {
  std::ostringstream os;
  fa::print_chart(os, "memory", fa::ChartUnit::bytes,
                  {{"01 eigen", {{512, 2097152}, {1024, 8388608}}}, {"02 online", {{512, 4096}, {1024, 8192}}}});
  const std::string s = os.str();
  CHECK(s.find("N=512") != std::string::npos);
  CHECK(s.find("2.0 MiB") != std::string::npos);
  CHECK(s.find("grows as N^2.00") != std::string::npos);
  CHECK(s.find("grows as N^1.00") != std::string::npos);
}

TEST_CASE("the table aligns its columns") {
  fa::Table t{{"a", "bb"}, {{"1", "2"}, {"333", "4"}}};
  std::ostringstream os;
  t.print(os);
  CHECK(os.str().find("333") != std::string::npos);
}
