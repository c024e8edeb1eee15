#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "fa/cli.hpp"

namespace {

fa::CliSpec spec() {
  fa::CliSpec s;
  s.program = "step99_test";
  s.summary = "a test stage";
  s.default_sweep = {128, 256};
  s.dims = {32, 64};
  s.variants = {"a", "b"};
  return s;
}

fa::Options parse(std::vector<std::string> args) {
  std::vector<const char*> argv{"step99_test"};
  for (const auto& a : args) argv.push_back(a.c_str());
  return fa::parse_cli(static_cast<int>(argv.size()), argv.data(), spec());
}

std::string error_of(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const fa::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("defaults give the default sweep") {
  const auto o = parse({});
  REQUIRE(o.sizes.size() == 2);
  CHECK(o.sizes[0] == std::pair<std::int64_t, std::int64_t>{128, 128});
  CHECK(o.verify);
}

TEST_CASE("shapes, flags and the --flag=value form") {
  const auto o = parse({"--batch", "2", "--heads=3", "--seq-q", "5", "--seq-k", "9", "--dim", "32",
                        "--causal", "--scale", "0.25", "--variant", "b", "--json", "r.json", "--no-verify"});
  CHECK(o.problem.batch == 2);
  CHECK(o.problem.heads == 3);
  CHECK(o.problem.dim == 32);
  CHECK(o.problem.causal);
  CHECK(o.problem.scale == 0.25f);
  REQUIRE(o.sizes.size() == 1);
  CHECK(o.sizes[0] == std::pair<std::int64_t, std::int64_t>{5, 9});
  CHECK(o.variant == "b");
  CHECK(o.json_path == "r.json");
  CHECK_FALSE(o.verify);
}

TEST_CASE("sweeps accept k and M suffixes") {
  const auto o = parse({"--sweep", "1,1k,1M"});
  REQUIRE(o.sizes.size() == 3);
  CHECK(o.sizes[1].first == 1024);
  CHECK(o.sizes[2].second == 1024 * 1024);
}

TEST_CASE("bad usage is one clear line that names the problem") {
  CHECK(error_of({"--bogus"}).find("unknown option '--bogus'") != std::string::npos);
  CHECK(error_of({"--seq"}).find("needs a value") != std::string::npos);
  CHECK(error_of({"--seq", "abc"}).find("positive integer") != std::string::npos);
  CHECK(error_of({"--seq", "-5"}).find("positive integer") != std::string::npos);
  CHECK(error_of({"--seq", "0"}).find("positive integer") != std::string::npos);
  CHECK(error_of({"--dim", "48"}).find("not supported") != std::string::npos);
  CHECK(error_of({"--dtype", "float64"}).find("--dtype") != std::string::npos);
  CHECK(error_of({"--variant", "c"}).find("--variant") != std::string::npos);
  CHECK(error_of({"--scale", "-1"}).find("--scale") != std::string::npos);
  CHECK(error_of({"--seq", "4", "--sweep", "4,8"}).find("either") != std::string::npos);
  CHECK(error_of({"--save", "out"}).find("--save") != std::string::npos);
  CHECK(error_of({"--load", "d", "--seq", "4"}).find("--load") != std::string::npos);
  CHECK(error_of({"--causal=yes"}).find("takes no value") != std::string::npos);
  for (const auto& msg : {error_of({"--bogus"}), error_of({"--dim", "48"})}) CHECK(msg.find('\n') == std::string::npos);
}

TEST_CASE("--help is recognised and the usage text lists the flags") {
  CHECK(parse({"--help"}).help);
  const std::string u = fa::usage(spec());
  for (const char* flag : {"--batch", "--heads", "--seq", "--dim", "--causal", "--dtype", "--seed", "--scale",
                           "--sweep", "--load", "--save", "--json", "--reps", "--no-verify", "--variant"})
    CHECK_MESSAGE(u.find(flag) != std::string::npos, flag);
}
