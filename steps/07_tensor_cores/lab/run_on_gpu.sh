#!/usr/bin/env bash
# run_on_gpu.sh — stage 07 on a GPU machine (an H100 for the figures chapter 07 quotes): its tests,
# the sanitizers on awkward shapes, the ladder at the FlashAttention papers' shapes (the results files
# of the chapter's ladder table) and the tuning aid. Each step's log and results file go to OUT; one
# line per step says how it ended; the exit status counts the failures.
#   steps/07_tensor_cores/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [PARTS]
# PARTS (default "tests sanitizers ladder tune") picks the steps, in that order.
# Build first: cmake --build BUILD_DIR --target step07_tensor_cores test_step07 test_step07_ladder step07_tune
#              (and ex07 for its check)
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [PARTS]} build=${2:-build} parts=${3:-tests sanitizers ladder tune}
s=$build/steps/07_tensor_cores
exe=$s/step07_tensor_cores
mkdir -p "$out"
failures=0
want() { [[ " $parts " == *" $1 "* ]]; }
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt"

# Every test of the stage and its exercise: the doctests, the CLI tests, the large-logit --load check.
want tests && run ctest ctest --test-dir "$build" -R "step07|ex07" --output-on-failure
if want sanitizers; then
  small="--heads 2 --reps 1 --warmup 0 --no-verify"
  for causal in "" "--causal"; do
    for tool in memcheck racecheck synccheck; do
      run ${tool}_d64${causal:+_causal} compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $small --dim 64 \
          --seq-q 300 --seq-k 129 $causal
      run ${tool}_d256${causal:+_causal} compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $small --dim 256 \
          --dtype float16 --seq-q 129 --seq-k 300 $causal
    done
  done
fi
# The ladder (every rung, verified) at the paper shapes: the results files behind chapter 07's table.
if want ladder; then
  for dim in 64 128; do
    for causal in "" "--causal"; do
      name=step07_ladder_d$dim${causal:+_causal}
      run $name "$exe" --ladder --paper-shapes --dim $dim --sweep 4k $causal --reps 10 --warmup 3 --json "$out/$name.json"
    done
  done
fi
want tune && run tune "$s/step07_tune" 4096 16384
echo "$failures failed"
exit $failures
