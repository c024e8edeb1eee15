// step02_cpu_online_softmax — runs stage 02 over a short sweep beside stage 01, verifies it
// against float64 and stage 01, and charts the memory of both: N² for stage 01, N for stage 02.
// Everything but the stage's own description lives in fa::run_stage (common/src/stage.cpp).
//
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax                  the default sweep
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax --seq 16k --reps 1 --warmup 0
//       (144 KiB of workspace where stage 01 would need 2 GiB for S and P)
#include "01_cpu_attention/attention.hpp"
#include "fa/stage.hpp"
#include "online_softmax.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step02_cpu_online_softmax";
  spec.summary = "the online softmax: tiles over K/V, running max and sum, no N x N memory (CPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 4;
  spec.defaults.dim = 64;
  spec.default_sweep = {256, 512, 1024, 2048, 4096};
  spec.notes =
      "memory: one 64 x 64 score tile (16 KiB) and m, l for every query row of a head (8 bytes a row).\n"
      "stage 01 runs beside it up to N = 2048, for the charts.\n"
      "verification: float64 on all rows while small, sampled rows beyond; and stage 01 on every row\n"
      "up to 1.1e9 FLOPs.";
  fa::StageCli cli(spec);
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::StageDefinition def;
  def.id = "02";
  def.variants = {
      fa::host_variant("02", "online", /*ours=*/true, fa::step02::attention_forward),
      // The previous stage, measured beside this one for the charts; its S and P grow as N².
      fa::host_variant("01", "eigen", /*ours=*/false, fa::step01::attention_forward, /*max_seq=*/2048),
  };
  def.verify.max_full_flops = 3e8;
  def.verify.previous = fa::PreviousStage{"01 eigen", fa::host_forward(fa::step01::attention_forward), 1.1e9};
  def.default_reps = 3;
  return fa::run_stage(cli, def);
}
