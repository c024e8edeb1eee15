#!/usr/bin/env bash
# run_on_gpu.sh — stage 09 on a GPU machine (compute capability 9.0: an H100 or H200): its tests,
# the tests of the Hopper wrappers it teaches (fa/cuda/hopper/) and exercise ex09, compute-sanitizer
# on every rung at awkward shapes, and the measurements behind docs/09_hopper.md: the ladder's five
# rungs beside stage 07 at the FlashAttention-paper shapes (B·N = 16384 tokens, H·D = 2048),
# N = 4k and 16k, D = 64 and 128, causal and not, one results file each. Logs and results go to OUT;
# one line per step says how it ended; the exit status counts the failures.
#   steps/09_hopper/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|tests|sanitize|ladder]
# Build first: cmake --build BUILD_DIR --target step09_hopper test_step09 test_hopper_wgmma
#              test_hopper_tma ex09_hopper_solution
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|tests|sanitize|ladder]} build=${2:-build} what=${3:-all}
exe=$build/steps/09_hopper/step09_hopper
mkdir -p "$out/logs"
failures=0
run() {  # run NAME COMMAND...: COMMAND's output into OUT/logs/NAME.txt, one line of how it ended
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/logs/$name.txt" 2>&1
  local code=$?
  echo "$name: exit $code, $((SECONDS - start)) s"
  [ $code -eq 0 ] || failures=$((failures + 1))
}
want() { [ "$what" = all ] || [ "$what" = "$1" ]; }

if want tests; then
  run ctest ctest --test-dir "$build" -R "step09|test_hopper_|ex09" --output-on-failure
fi
# Every rung under the three sanitizers: tails of both tile sizes, Nq ≠ Nk, causal, two heads.
if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    for d in 64 128 256; do
      run ${tool}_d$d compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --dim $d --seq-q 200 --seq-k 333 \
          --heads 2 --causal --reps 1 --warmup 0 --no-verify
    done
  done
fi
# The ladder: every rung and stage 07 at the paper shapes, verified (sampled rows) and timed.
if want ladder; then
  for d in 64 128; do
    for causal in "" "--causal"; do
      run ladder_d$d${causal:+_causal} "$exe" --paper-shapes --dim $d --sweep 4k,16k $causal --reps 20 \
          --json "$out/step09_d$d${causal:+_causal}.json"
    done
  done
fi
echo "$failures step(s) failed"
exit $((failures > 0))
