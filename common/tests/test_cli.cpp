#include <doctest/doctest.h>

#include <sys/stat.h>

#include <algorithm>

#include <filesystem>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "fa/cli.hpp"
#include "fa/npy.hpp"
#include "fa/stage.hpp"

namespace {

fa::CliSpec spec() {
  fa::CliSpec s;
  s.program = "step99_test";
  s.summary = "a test stage";
  s.default_sweep = {128, 256};
  s.supports.dims = {32, 64};
  s.variants = {"a", "b"};
  return s;
}

struct Parsed {
  std::optional<int> exit;  // nullopt: parsed, go on
  std::string out, err;
  fa::RunOptions options;
  bool stage_flag = false;
};

// Parses like a stage's main, with one stage flag of its own, capturing what it prints.
Parsed parse(std::vector<std::string> args, std::int64_t default_seq_q = 0, std::int64_t heads = 1,
             std::int64_t heads_kv = 0) {
  std::vector<const char*> argv{"step99_test"};
  for (const auto& a : args) argv.push_back(a.c_str());
  Parsed r;
  fa::CliSpec s = spec();
  s.default_seq_q = default_seq_q;
  s.defaults.heads = heads;
  s.defaults.heads_kv = heads_kv;
  fa::StageCli cli(s);
  cli.app().add_flag("--stage-flag", r.stage_flag, "a flag of this stage only");
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  r.exit = cli.parse(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  r.out = out.str();
  r.err = err.str();
  r.options = cli.options();
  return r;
}

// The one line a bad command line prints (exit code 2 checked).
std::string error_of(std::vector<std::string> args) {
  const Parsed r = parse(std::move(args));
  CHECK(r.exit == 2);
  CHECK_MESSAGE(std::count(r.err.begin(), r.err.end(), '\n') == 1, r.err);
  return r.err;
}

}  // namespace

TEST_CASE("defaults give the default sweep") {
  const auto r = parse({});
  REQUIRE_FALSE(r.exit);
  REQUIRE(r.options.sizes.size() == 2);
  CHECK(r.options.sizes[0] == std::pair<std::int64_t, std::int64_t>{128, 128});
  CHECK(r.options.verify);
  CHECK(r.options.problem.dtype == fa::DType::float32);
}

TEST_CASE("a decoding stage's default Nq: used when only keys are given, never over --seq or --seq-q") {
  using Size = std::pair<std::int64_t, std::int64_t>;
  CHECK(parse({}, 1).options.sizes == std::vector<Size>{{1, 128}, {1, 256}});
  CHECK(parse({"--sweep", "1k,8k"}, 4).options.sizes == std::vector<Size>{{4, 1024}, {4, 8192}});
  CHECK(parse({"--seq-k", "300"}, 1).options.sizes == std::vector<Size>{{1, 300}});
  CHECK(parse({"--seq", "300"}, 1).options.sizes == std::vector<Size>{{300, 300}});
  CHECK(parse({"--seq-q", "7", "--sweep", "64,128"}, 1).options.sizes == std::vector<Size>{{7, 64}, {7, 128}});
  CHECK(parse({"--seq-k", "9", "--sweep", "2,3"}, 1).options.sizes == std::vector<Size>{{2, 9}, {3, 9}});
  CHECK(parse({"--seq-k", "300"}).options.sizes == std::vector<Size>{{300, 300}});  // no default: Nq = Nk
}

TEST_CASE("a stage's default Hkv goes with its default Hq: --heads alone means heads of their own") {
  CHECK(parse({"--heads", "6"}, 0, 8, 2).options.problem.kv_heads() == 6);
  CHECK(parse({}, 0, 8, 2).options.problem.kv_heads() == 2);
  CHECK(parse({"--heads", "6", "--heads-kv", "3"}, 0, 8, 2).options.problem.kv_heads() == 3);
  CHECK(parse({"--heads-kv", "4"}, 0, 8, 2).options.problem.kv_heads() == 4);
}

TEST_CASE("shapes, flags, a stage's own flag and the --flag=value form") {
  const auto json = (std::filesystem::temp_directory_path() / "fa_cli_test" / "r.json").string();
  const auto r = parse({"--batch", "2", "--heads=4", "--heads-kv", "4", "--seq-q", "5", "--seq-k", "9", "--dim",
                        "32", "--causal", "--scale", "0.25", "--variant", "b", "--json", json, "--no-verify",
                        "--stage-flag", "--seed", "0"});
  REQUIRE_FALSE(r.exit);
  const fa::Problem& p = r.options.problem;
  CHECK(p.batch == 2);
  CHECK(p.heads == 4);
  CHECK(p.heads_kv == 4);
  CHECK(p.dim == 32);
  CHECK(p.causal);
  CHECK(p.scale == 0.25f);
  REQUIRE(r.options.sizes.size() == 1);
  CHECK(r.options.sizes[0] == std::pair<std::int64_t, std::int64_t>{5, 9});
  CHECK(r.options.variant == "b");
  CHECK(r.options.json_path == json);
  CHECK(r.options.seed == 0);
  CHECK_FALSE(r.options.verify);
  CHECK(r.stage_flag);
  CHECK(std::filesystem::is_directory(std::filesystem::path(json).parent_path()));  // --json made its folder
}

TEST_CASE("sizes accept k and M suffixes") {
  const auto r = parse({"--sweep", "1,1k,1M", "--batch", "2k"});
  REQUIRE_FALSE(r.exit);
  REQUIRE(r.options.sizes.size() == 3);
  CHECK(r.options.sizes[1].first == 1024);
  CHECK(r.options.sizes[2].second == 1024 * 1024);
  CHECK(r.options.problem.batch == 2048);
}

TEST_CASE("bad usage is one clear line that names the problem, exit code 2") {
  CHECK(error_of({"--bogus"}).find("--bogus") != std::string::npos);
  CHECK(error_of({"--seq"}).find("--seq") != std::string::npos);
  CHECK(error_of({"--seq", "abc"}).find("positive integer") != std::string::npos);
  CHECK(error_of({"--seq", "0"}).find("positive integer") != std::string::npos);
  CHECK(error_of({"--seq", "99999999999999"}).find("2^40") != std::string::npos);
  CHECK(error_of({"--dim", "48"}).find("not supported") != std::string::npos);
  CHECK(error_of({"--dtype", "float64"}).find("--dtype") != std::string::npos);
  CHECK(error_of({"--dtype", "float16"}).find("runs float32") != std::string::npos);
  CHECK(error_of({"--heads", "8", "--heads-kv", "2"}).find("grouped-query") != std::string::npos);
  CHECK(error_of({"--heads", "8", "--heads-kv", "3"}).find("multiple") != std::string::npos);
  CHECK(error_of({"--seq-lens", "3,5"}).find("variable-length") != std::string::npos);
  CHECK(error_of({"--seq-lens", "3,5", "--seq", "4"}).find("drop --seq") != std::string::npos);
  CHECK(error_of({"--seq-lens", "3,0"}).find("--seq-lens") != std::string::npos);
  CHECK(error_of({"--variant", "c"}).find("--variant") != std::string::npos);
  CHECK(error_of({"--scale", "-1"}).find("--scale") != std::string::npos);
  CHECK(error_of({"--seq", "4", "--sweep", "4,8"}).find("either") != std::string::npos);
  CHECK(error_of({"--save", "out"}).find("--save") != std::string::npos);
  CHECK(error_of({"--load", "d", "--seq", "4"}).find("--load") != std::string::npos);
  CHECK(error_of({"--seq", "4", "--seq", "8"}).find("--seq") != std::string::npos);  // given twice
  CHECK(error_of({"--json", "/proc/version/r.json"}).find("--json") != std::string::npos);
  // B·H·N·D past 64-bit sizes is refused, not wrapped around.
  CHECK(error_of({"--batch", "16M", "--heads", "1M", "--seq", "1M", "--dim", "32"}).find("64-bit") !=
        std::string::npos);
}

TEST_CASE("an empty value, a seed past 64 bits, a scale float32 cannot hold: refused, never read as the default") {
  for (const char* flag : {"--load", "--json", "--save", "--seq", "--sweep", "--seq-lens", "--seq-q", "--seq-k",
                           "--scale", "--seed", "--reps", "--mem-limit-gb", "--dtype", "--variant"}) {
    CAPTURE(flag);
    CHECK(error_of({flag, ""}).find(flag) != std::string::npos);
  }
  CHECK(error_of({"--json="}).find("--json") != std::string::npos);
  CHECK(error_of({"--seed", "18446744073709551616"}).find("--seed") != std::string::npos);
  CHECK(error_of({"--seed", "-1"}).find("--seed") != std::string::npos);
  CHECK(error_of({"--seed", "0x10"}).find("--seed") != std::string::npos);
  CHECK(parse({"--seed", "18446744073709551615"}).options.seed == 18446744073709551615ull);
  CHECK(error_of({"--scale", "1e-50"}).find("--scale") != std::string::npos);  // rounds to 0 in float32
  CHECK(error_of({"--scale", "0"}).find("--scale") != std::string::npos);      // 0 would mean the default
  CHECK(error_of({"--scale", "1e39"}).find("--scale") != std::string::npos);
  CHECK(parse({"--scale", "1e-30"}).options.problem.scale == 1e-30f);
  CHECK(parse({}).options.problem.scale == 0.0f);  // not given: the default 1/sqrt(D)
}

TEST_CASE("values with control bytes are echoed escaped, on one line") {
  const std::string err = error_of({"--dtype", "\x1b]0;title\a\nnext"});
  CHECK(err.find("\\x1b]0;title\\x07\\x0anext") != std::string::npos);
  CHECK(std::count_if(err.begin(), err.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }) == 1);
  CHECK(fa::one_line(std::string("a\0b\x7f\xc2\x9b[31m\xc3\xa9", 12)) == "a\\x00b\\x7f\\xc2\\x9b[31m\xc3\xa9");
  CHECK(std::string(fa::UsageError(std::string("nul\0here", 8)).what()) == "nul\\x00here");
  // Bytes that are no UTF-8: a lone C1 byte (CSI), invalid starts, an overlong '/', a surrogate, a
  // cut sequence; valid 3- and 4-byte characters pass as they are.
  CHECK(fa::one_line("\x9b" "31m") == "\\x9b31m");
  CHECK(fa::one_line("\xff\xfe\xc0\xaf") == "\\xff\\xfe\\xc0\\xaf");
  CHECK(fa::one_line("\xed\xa0\x80") == "\\xed\\xa0\\x80");
  CHECK(fa::one_line("caf\xc3") == "caf\\xc3");
  CHECK(fa::one_line("\xe2\x82\xac \xf0\x9f\x99\x82") == "\xe2\x82\xac \xf0\x9f\x99\x82");
  CHECK(fa::one_line(fa::one_line("\x9b\x1b\xc2\x85")) == fa::one_line("\x9b\x1b\xc2\x85"));  // idempotent
}

TEST_CASE("--json, --save: only regular files are written, and a FIFO is refused before it can block") {
  const auto dir = std::filesystem::temp_directory_path() / "fa_test_cli_fifo";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "results.json").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of({"--json", fifo}).find("FIFO") != std::string::npos);
  CHECK(error_of({"--json", "/dev/full"}).find("character device") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("--help prints the flags, the stage's own too, and exits 0") {
  const auto r = parse({"--help"});
  CHECK(r.exit == 0);
  for (const char* flag : {"--batch", "--heads", "--heads-kv", "--seq", "--dim", "--causal", "--dtype", "--seed",
                           "--scale", "--sweep", "--load", "--save", "--json", "--reps", "--no-verify", "--variant",
                           "--stage-flag", "exit codes"})
    CHECK_MESSAGE(r.out.find(flag) != std::string::npos, flag);
}

TEST_CASE("--paper-shapes: B·N = 16384 tokens and H·D = 2048 at every N, or one line why not") {
  fa::Problem p;
  p.seq_q = p.seq_k = 4096;
  p.dim = 128;
  p.heads_kv = 4;
  const fa::Problem q = fa::paper_shape(p);
  CHECK(q.batch == 4);
  CHECK(q.heads == 16);
  CHECK(q.kv_heads() == 16);
  p.seq_q = 300;  // Nq != Nk: the batch follows the longer of the two
  p.seq_k = 32768;
  CHECK(fa::paper_shape(p).batch == 1);

  fa::RunOptions opt;
  opt.problem.dim = 64;
  fa::StageDefinition def;
  CHECK(fa::use_paper_shapes(opt, def).empty());
  REQUIRE(def.shape_case);
  opt.problem.seq_q = opt.problem.seq_k = 1024;
  CHECK(def.shape_case(opt.problem).batch == 16);
  CHECK(def.shape_case(opt.problem).heads == 32);
  CHECK(def.shape_note == "B·N = 16384 tokens, H·D = 2048");

  fa::StageDefinition untouched;
  opt.problem.dim = 96;
  CHECK(fa::use_paper_shapes(opt, untouched) == "--paper-shapes needs D dividing 2048, not D = 96");
  CHECK(!untouched.shape_case);
  opt.problem.dim = 64;
  opt.load_dir = "inputs";
  CHECK(fa::use_paper_shapes(opt, untouched) == "--paper-shapes and --load cannot be combined");
  CHECK(!untouched.shape_case);
}

TEST_CASE("require_finite names the first non-finite element of a tensor split across the host's cores") {
  fa::HostTensor t(fa::Shape4{2, 3, 4096, 128}, fa::DType::bfloat16);  // 3.1 M elements: parallel
  CHECK_NOTHROW(fa::require_finite(t, "q"));
  auto message = [&] {
    try {
      fa::require_finite(t, "q");
    } catch (const fa::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::int64_t late = t.numel() - 5, early = 3 * 128 + 1;  // in the last range and in the first
  t.set(late, std::numeric_limits<float>::quiet_NaN());
  CHECK(message() == "q[1,2,4095,123] is nan: inputs must be finite");
  t.set(early, -std::numeric_limits<float>::infinity());
  CHECK(message() == "q[0,0,3,1] is -inf: inputs must be finite");
}

TEST_CASE("a loaded dO is bounded as V is: past float32's range through dV's sum or dO·V, refused") {
  // Nq = 4 queries, one head: dV's sum of 4 rows bounds |dO| by float32's largest / 4 (8.5e37).
  const auto dir = std::filesystem::temp_directory_path() / "fa_test_cli_do_bound";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const fa::Shape4 shape{1, 1, 4, 8};
  fa::write_npy_tensor((dir / "q.npy").string(), fa::HostTensor(shape, 0.5f));
  fa::write_npy_tensor((dir / "k.npy").string(), fa::HostTensor(shape, 0.5f));
  fa::write_npy_tensor((dir / "v.npy").string(), fa::HostTensor(shape, 1e10f));
  auto load_error = [&](float fill, std::int64_t at) {
    fa::HostTensor d_o(shape, 0.5f);
    if (at >= 0) d_o.set(at, fill);
    fa::write_npy_tensor((dir / "do.npy").string(), d_o);
    fa::Problem p;
    try {
      fa::load_inputs(dir.string(), p, fa::Pass::backward, 1);
    } catch (const fa::UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(load_error(0, -1) == "no error");
  // 1e38 elementwise; 1e30 fits that rule, but dO·V (V's rows of norm 2.8e10) would not fit float32.
  CHECK(load_error(1e38f, 13).find("do[0,0,1,5] is 1e+38: with 4 query rows on each key") == 0);
  CHECK(load_error(1e30f, 17).find("do[0,0,2,:] has norm 1e+30") == 0);
  fa::Problem forward;  // a forward run reads no dO
  CHECK_NOTHROW(fa::load_inputs(dir.string(), forward, fa::Pass::forward, 1));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a backward case whose scaled scores pass float32 names the scores, not dO") {
  // dO's row bound shrinks as the scale grows; the scores are checked first, so a scale that no dO
  // could survive is refused as what it is.
  fa::Problem p;
  p.batch = 1;
  p.heads = 1;
  p.seq_q = p.seq_k = 64;
  p.dim = 64;
  p.scale = 1e38f;
  std::string message = "no error";
  try {
    fa::make_case_inputs(p, fa::Pass::backward, 2024, fa::InputKind::normal, false);
  } catch (const fa::UsageError& e) {
    message = e.what();
  }
  CHECK(message.find("overflows float32") != std::string::npos);
}

