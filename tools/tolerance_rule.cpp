// tolerance_rule.cpp — the C++ tolerance rule (fa::tolerance_from_plain, fa::tolerance_for,
// fa::compare) evaluated on a table of cases, so that test_tolerance_agrees.py can prove that the
// Python rule (tools/flashcourse/tolerance.py) gives the same bounds and verdicts.
//
//   tolerance_rule CASES.json     prints {"results": [...]}, one object per case, in order
//
// A case is one of
//   {"kind": "bounds",  "dtype": "bfloat16", "plain_error": e, "max_abs_ref": m}  -> atol, rtol
//   {"kind": "widened", "atol": a, "rtol": r, "large_logits": true}              -> atol, rtol
//   {"kind": "compare", "got": [...], "ref": [...], "atol": a, "rtol": r}         -> the report
//   {"kind": "rule", "dtype": ..., "plain_error": e, "max_abs_ref": m, "got": [...], "ref": [...]}
//        -> the bounds of "bounds", then the report of "compare" with them
// JSON has no NaN or infinity: a number may be written as the string "nan", "inf" or "-inf", and
// a figure that is not finite is printed so. Doubles are printed with 17 significant digits, so
// the comparison on the Python side is exact. `got` is float32 in fa::compare, as a stage's output.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fa/compare.hpp"
#include "fa/dtype.hpp"
#include "fa/random.hpp"
#include "fa/verify.hpp"

namespace {

using nlohmann::json;

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    throw std::invalid_argument("not a number: " + s);
  }
  return v.get<double>();
}

json figure(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return json::parse(buf);  // the shortest exact text of the double, as a JSON number
}

fa::Tolerance bounds(const json& c) {
  return fa::tolerance_from_plain(number(c.at("plain_error")), number(c.at("max_abs_ref")),
                                  fa::parse_dtype(c.at("dtype").get<std::string>()));
}

json report(const json& c, fa::Tolerance tol) {
  std::vector<float> got;
  std::vector<double> ref;
  for (const json& v : c.at("got")) got.push_back(static_cast<float>(number(v)));
  for (const json& v : c.at("ref")) ref.push_back(number(v));
  const fa::CompareReport r = fa::compare("case", got, ref, tol);
  return {{"count", r.count},         {"bad", r.bad},
          {"first_bad", r.first_bad}, {"max_abs", figure(r.max_abs)},
          {"max_rel", figure(r.max_rel)}, {"rel_frobenius", figure(r.rel_frobenius)},
          {"ok", r.ok()},            {"atol", figure(tol.atol)},
          {"rtol", figure(tol.rtol)}};
}

json evaluate(const json& c) {
  const std::string kind = c.at("kind").get<std::string>();
  if (kind == "bounds") {
    const fa::Tolerance t = bounds(c);
    return {{"atol", figure(t.atol)}, {"rtol", figure(t.rtol)}};
  }
  if (kind == "widened") {
    const fa::Tolerance base{number(c.at("atol")), number(c.at("rtol"))};
    const fa::Tolerance t = fa::tolerance_for(
        base, c.at("large_logits").get<bool>() ? fa::InputKind::large_logits : fa::InputKind::normal);
    return {{"atol", figure(t.atol)}, {"rtol", figure(t.rtol)}};
  }
  if (kind == "compare") return report(c, {number(c.at("atol")), number(c.at("rtol"))});
  if (kind == "rule") return report(c, bounds(c));
  throw std::invalid_argument("unknown kind: " + kind);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: tolerance_rule CASES.json\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    if (!in) throw std::invalid_argument(std::string("cannot read ") + argv[1]);
    const json cases = json::parse(in);
    json out = json::array();
    for (const json& c : cases.at("cases")) out.push_back(evaluate(c));
    std::cout << json{{"results", out}}.dump() << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tolerance_rule: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
