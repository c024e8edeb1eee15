// step12_variable_lengths — runs stage 12's prefill (a prompt's first pass, Nq = Nk) with grouped
// heads, one sequence or a packed batch of several, beside the same kernel on K/V repeated to Hq
// (the multi-head problem) and stage 07 on repeated heads; verifies it against float64 (each
// sequence of a packed batch alone) and stage 07, and charts memory and time. The default: 32
// query heads on 8 K/V heads, D = 128, bf16, prompts of 4k and 16k tokens.
//
//   build/steps/12_variable_lengths/step12_variable_lengths                          the default sweep
//   build/steps/12_variable_lengths/step12_variable_lengths --seq-lens 1k,2k,300 --causal   a packed batch
//   build/steps/12_variable_lengths/step12_variable_lengths --load DIR      (cu_seqlens.txt beside: packed)
#include "12_variable_lengths/12_variable_lengths.cuh"
#include "fa/cuda/stage_arch.cuh"
#include "fa/cuda/stage_gpu.cuh"
#include "fa/stage.hpp"

int main(int argc, char** argv) {
  fa::CliSpec spec;
  spec.program = "step12_variable_lengths";
  spec.summary = "prefill with grouped-query heads and packed batches of variable lengths on stage 09's kernel (GPU)";
  spec.defaults.batch = 1;
  spec.defaults.heads = 32;
  spec.defaults.heads_kv = 8;
  spec.defaults.dim = 128;
  spec.defaults.dtype = fa::DType::bfloat16;
  spec.default_sweep = {4096, 16384};
  spec.supports = fa::step12::kSupports;
  spec.variants = {"prefill", "prefill_repeated"};
  spec.notes =
      "prefill: stage 09's overlap rung on compute capability 9.0 with this stage's policies: grouped heads (the\n"
      "K/V tensor maps over B·Hkv heads, query head bh reading K/V head bh / (Hq/Hkv)) and, with --seq-lens or\n"
      "--load with cu_seqlens.txt, packed rows (the sequences one after the other in every head's rows, a block\n"
      "per query tile of each sequence, grid z the sequence: no padding computed); stage 07 on K/V repeated to\n"
      "Hq elsewhere (no packed batches).\n"
      "prefill_repeated: the same kernel on the multi-head problem: K/V repeated to Hq first (split_ms: the\n"
      "repeat and the kernel apart), what grouped prefill is measured against.\n"
      "memory beyond Q, K, V, O, LSE: cu_seqlens (packed); prefill_repeated's repeated K and V.\n"
      "compared with: stage 07 on K/V repeated to Hq heads (the repeat is timed with it).\n"
      "verification: float64 on all rows up to 2e9 FLOPs, sampled rows beyond (docs/tolerance.md), each\n"
      "sequence of a packed batch alone; stage 07 on the same inputs.";
  fa::StageCli cli(spec);
  if (const auto exit_code = cli.parse(argc, argv)) return *exit_code;

  fa::StageDefinition def;
  def.id = "12";
  def.variants.push_back(fa::gpu_variant("12", "prefill", /*ours=*/true, fa::step12::attention_forward_prefill));
  def.variants.push_back(
      fa::gpu_variant("12", "prefill_repeated", /*ours=*/true, fa::step12::attention_forward_prefill_repeated));
  // The previous stage beside it, same dtype: the chart's comparison and the second opinion.
  def.variants.push_back(fa::gpu_variant("07", "flash", /*ours=*/false, fa::step12::stage07_repeated_heads));
  def.verify.previous = fa::PreviousStage{"07 flash", fa::gpu_forward(fa::step12::stage07_repeated_heads)};
  fa::use_gpu_defaults(def, fa::kStageMinComputeCapability);
  return fa::run_stage(cli, def);
}
