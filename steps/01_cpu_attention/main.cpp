// step01_cpu_attention — runs stage 01 over a short sweep, verifies it against a float64 loop,
// and charts its memory and time. Everything but the stage's own description lives in
// fa::run_stage (common/src/stage.cpp), which every stage shares.
//
//   build/steps/01_cpu_attention/step01_cpu_attention                     the default sweep
//   build/steps/01_cpu_attention/step01_cpu_attention --seq 77 --causal   one awkward size
#include "attention.hpp"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step01_cpu_attention";
  spec.summary = "attention as written in the paper: S and P materialized, with Eigen (CPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 4;
  spec.defaults.dim = 64;
  spec.default_sweep = {256, 512, 1024, 2048};
  spec.notes =
      "memory: S and P take 2*Nq*Nk*4 bytes, measured; --seq 16k needs 2 GiB of them.\n"
      "verification: all rows against a float64 loop while the problem is small, sampled rows beyond\n"
      "(the allowed error is measured on the same rows: docs/tolerance.md).";
  fa::StageCli cli(spec);
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::StageDefinition def;
  def.id = "01";
  def.variants = {fa::host_variant("01", "eigen", /*ours=*/true, fa::step01::attention_forward)};
  // The float64 loop is about 20x slower than Eigen: it checks every row up to N = 512 at the
  // default B=1 H=4 D=64, and 48 sampled rows (plus the edge rows) beyond.
  def.verify.max_full_flops = 3e8;
  return fa::run_stage(cli, def);
}
