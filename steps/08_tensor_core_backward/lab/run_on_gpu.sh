#!/usr/bin/env bash
# run_on_gpu.sh — stage 08 on a GPU machine (an H100 for the figures chapter 08 quotes): its tests,
# the sanitizers on awkward shapes, the ladder at the FlashAttention papers' shapes (the results files
# of the chapter's ladder table, every rung verified), the tuning aid, the two dQ modes, and the
# comparison with PyTorch's FlashAttention-2 and cuDNN backward. Each step's log and results file go
# to OUT; one line per step says how it ended; the exit status counts the failures.
#   steps/08_tensor_core_backward/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [PARTS]
# PARTS (default "tests sanitizers ladder tune deterministic compare") picks the steps, in that order.
# Build first: cmake --build BUILD_DIR --target step08_tensor_core_backward test_step08 test_step08_ladder
#              step08_tune (and ex08 for its check)
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [PARTS]} build=${2:-build}
parts=${3:-tests sanitizers ladder tune deterministic compare}
s=$build/steps/08_tensor_core_backward
exe=$s/step08_tensor_core_backward
mkdir -p "$out"
failures=0
want() { [[ " $parts " == *" $1 "* ]]; }
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >"$out/gpu.txt"

want tests && run ctest ctest --test-dir "$build" -R "step08|ex08" --output-on-failure
if want sanitizers; then
  small="--heads 2 --reps 1 --warmup 0 --no-verify"
  for causal in "" "--causal"; do
    c=${causal:+_causal}
    for tool in memcheck racecheck synccheck; do
      run ${tool}_d128$c compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $small --dim 128 --dtype float16 \
          --seq-q 300 --seq-k 129 $causal
      run ${tool}_d256$c compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $small --dim 256 --seq-q 129 \
          --seq-k 300 $causal
      run ${tool}_ladder_d64$c compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $small --dim 64 --ladder \
          --sweep 77,200 $causal
    done
    run memcheck_deterministic$c compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" $small --dim 128 \
        --sweep 1,77,130 --deterministic $causal
  done
fi
# The ladder (every rung, verified) at the paper shapes: the results files behind chapter 08's table.
if want ladder; then
  for dim in 64 128; do
    for causal in "" "--causal"; do
      name=step08_ladder_d$dim${causal:+_causal}
      run $name "$exe" --ladder --paper-shapes --dim $dim --sweep 4k,16k $causal --reps 10 --warmup 3 \
          --json "$out/$name.json"
    done
  done
fi
want tune && run tune "$s/step08_tune" 4096 8192 16384
if want deterministic; then
  for dim in 64 128; do
    for causal in "" "--causal"; do
      for variant in flash flash-deterministic; do
        run ${variant}_d$dim${causal:+_causal} "$exe" --paper-shapes --dim $dim --sweep 4k,16k --reps 10 --warmup 3 \
            $causal --no-verify --variant $variant
      done
    done
  done
fi
root=$(cd "$(dirname "$0")/../../.." && pwd)
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
want compare && run compare python3 "$root/tools/compare_pytorch.py" --json "$out/compare_08_h100.json" --stage-exe "$exe" \
  --stage-variants flash --stage-args=--no-verify --backends flash,cudnn --dtype bfloat16 --dim 64,128 --causal both \
  --pass bwd --seq 1k,4k,16k --commit "$commit" --reps 10 --warmup 3
echo "$failures failed"
exit $failures
