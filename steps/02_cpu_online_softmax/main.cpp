// step02_cpu_online_softmax — runs stage 02 over a short sweep beside stage 01, verifies it
// against stage 01, and charts the memory of both: N² for stage 01, N for stage 02.
// Everything but the stage's own description lives in fa::run_stage (common/src/stage.cpp).
//
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax                  the default sweep
//   build/steps/02_cpu_online_softmax/step02_cpu_online_softmax --seq 16k --reps 1 --warmup 0
//       (144 KiB of workspace where stage 01 would need 2 GiB for S and P)
#include "01_cpu_attention/attention.hpp"
#include "fa/stage.hpp"
#include "online_softmax.hpp"

int main(int argc, char** argv) {
  fa::StageDefinition def;
  def.id = "02";
  def.cli.program = "step02_cpu_online_softmax";
  def.cli.summary = "the online softmax: tiles over K/V, running max and sum, no N x N memory (CPU)";
  def.cli.defaults.batch = 1;
  def.cli.defaults.heads = 4;
  def.cli.defaults.dim = 64;
  def.cli.default_sweep = {256, 512, 1024, 2048, 4096};
  def.cli.notes =
      "memory: one 64 x 64 score tile (16 KiB) and m, l for every query row of a head (8 bytes a row).\n"
      "stage 01 runs beside it up to N = 2048, for the charts.\n"
      "verification: all rows against stage 01 while the problem is small, sampled rows beyond\n"
      "(stage 01 on one-row problems: no N x N matrix at any N).";
  def.variants = {
      fa::host_variant("02", "online", /*ours=*/true, fa::step02::attention_forward),
      // The previous stage, measured beside this one for the charts; its S and P grow as N².
      fa::host_variant("01", "eigen", /*ours=*/false, fa::step01::attention_forward, /*max_seq=*/2048),
  };
  def.reference = {"01 eigen", fa::host_forward(fa::step01::attention_forward), fa::kFloat32Tol};
  def.default_reps = 3;
  return fa::run_stage(argc, argv, def);
}
