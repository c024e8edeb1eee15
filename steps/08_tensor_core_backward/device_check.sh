#!/usr/bin/env bash
# device_check.sh — stage 08 on a GPU machine (an H100 for the figures the chapter quotes), after
# building step08_tensor_core_backward, its tests, step08_tune and exercise ex08 in BUILD_DIR. One
# summary line per step; logs and results go into one bundle in OUT_DIR, rewritten after every step
# (the device tool brings back at most 8 files, and a call cut short still brings back what was done).
#   steps/08_tensor_core_backward/device_check.sh BUILD_DIR OUT_DIR [COMMIT]
# PARTS (default: all of them) picks what runs, in this order: tests (the stage's and ex08's, CTest),
# sanitizers (memcheck, racecheck, synccheck on small awkward shapes at D = 128 and 256, causal and
# not, and memcheck on the deterministic mode), tune (step08_tune at 4k, 8k, 16k keys), deterministic
# (the two dQ modes at D = 64 and 128), compare (beside PyTorch's flash and cuDNN backward:
# tools/compare_pytorch.py, the longest step). STEP_TIMEOUT=S stops any one step after S seconds.
set -uo pipefail
b=$1 bundle=$2/step08_device_check.tgz commit=${3:-unknown}
out=$b/device_check_08
rm -rf $out && mkdir -p $out
exe=$b/steps/08_tensor_core_backward/step08_tensor_core_backward
parts=${PARTS:-tests sanitizers tune deterministic compare}
want() { [[ " $parts " == *" $1 "* ]]; }
source "$(dirname "$0")/../../tools/device_step.sh"  # run NAME COMMAND...: one step, its log, the bundle

want tests && run ctest ctest --test-dir $b -R 'step08|ex08' -j 4 --output-on-failure
if want sanitizers; then
  small="--heads 2 --reps 1 --warmup 0 --no-verify"
  for causal in "" "--causal"; do
    for tool in memcheck racecheck synccheck; do
      run ${tool}_d128$causal compute-sanitizer --tool $tool --error-exitcode 99 $exe $small --dim 128 --dtype float16 --seq-q 300 --seq-k 129 $causal
      run ${tool}_d256$causal compute-sanitizer --tool $tool --error-exitcode 99 $exe $small --dim 256 --seq-q 129 --seq-k 300 $causal
    done
    run memcheck_deterministic$causal compute-sanitizer --tool memcheck --error-exitcode 99 $exe $small --dim 128 --sweep 1,77,130 --deterministic $causal
  done
fi
want tune && run tune $b/steps/08_tensor_core_backward/step08_tune 4096 8192 16384
if want deterministic; then
  for dim in 64 128; do
    for causal in "" "--causal"; do
      for variant in flash flash-deterministic; do
        run ${variant}_d$dim$causal $exe --paper-shapes --dim $dim --sweep 4k,16k --reps 10 --warmup 3 $causal --no-verify --variant $variant
      done
    done
  done
fi
want compare && run compare python3 tools/compare_pytorch.py --json $out/compare_08_h100.json --stage-exe $exe \
  --stage-variants flash --stage-args=--no-verify --backends flash,cudnn --dtype bfloat16 --dim 64,128 --causal both \
  --pass bwd --seq 1k,4k,16k --commit $commit --reps 10 --warmup 3
exit 0
