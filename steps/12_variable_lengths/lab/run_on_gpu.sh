#!/usr/bin/env bash
# run_on_gpu.sh — stage 12 on a GPU machine: its tests, the measurements chapter 12 quotes (grouped
# prefill beside the same kernel on repeated heads, D = 128 causal and not, D = 64; a packed batch of
# eight prompts, causal and not), the sanitizers on a grouped and a packed run, and the comparison
# beside PyTorch (tools/compare_prefill.py, where PyTorch is installed). Each step's log and the
# results files go to OUT; one line per step says how it ended; the exit status counts the failures.
#   steps/12_variable_lengths/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)]
# Build first: cmake --build BUILD_DIR --target step12_variable_lengths test_step12
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR]} build=${2:-build}
exe=$build/steps/12_variable_lengths/step12_variable_lengths
mkdir -p "$out"
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"

run test_step12 "$build/steps/12_variable_lengths/test_step12"
# Grouped prefill (32 query heads on 8 K/V heads) against the same kernel on K/V repeated to Hq:
# split_ms gives that kernel alone, the multi-head time grouped prefill is measured against.
for causal in "" "--causal"; do
  run prefill$causal "$exe" --sweep 4k,16k --heads 32 --heads-kv 8 --dim 128 $causal --reps 20 \
      --json "$out/step12_prefill${causal:+_causal}.json"
done
run prefill_d64 "$exe" --sweep 4k,16k --heads 32 --heads-kv 8 --dim 64 --reps 20 --json "$out/step12_prefill_d64.json"
# A packed batch of eight lengths, no padding computed, each sequence's FLOPs counted alone.
lens=1k,2k,3k,4k,6k,8k,12k,16k
run packed "$exe" --seq-lens $lens --heads 32 --heads-kv 8 --dim 128 --causal --reps 20 --json "$out/step12_packed_causal.json"
run packed_noncausal "$exe" --seq-lens $lens --heads 32 --heads-kv 8 --dim 128 --reps 20 --json "$out/step12_packed.json"
# The sanitizers on the awkward shapes: lengths off every tile, a sequence of one token, G = 4.
for tool in memcheck racecheck synccheck; do
  run ${tool}_prefill compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --seq 300 --heads 8 --heads-kv 2 \
      --dim 128 --causal --reps 1 --warmup 0
  run ${tool}_packed compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --seq-lens 77,1,300,128 --heads 8 \
      --heads-kv 2 --dim 64 --causal --reps 1 --warmup 0
done
# Beside PyTorch: SDPA with enable_gqa, the packed batch padded, FlashAttention-2's varlen kernel,
# nested tensors.
if python3 -c "import torch" 2>/dev/null; then
  run compare_prefill python3 tools/compare_prefill.py --exe "$exe" --json "$out/compare_12_prefill.json" \
      --commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" --stage-timeout 300
else
  echo "compare_prefill: skipped (no PyTorch)"
fi
echo "$failures step(s) failed"
exit $((failures > 0))
