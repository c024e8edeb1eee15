#!/usr/bin/env bash
# tools/gpu_check.sh OUT [COMMIT] — everything a GPU machine must prove about the course, in one go
# (`./course gpu-check OUT` runs it): build for sm_90 into build-gpu, then these parts, in order:
#
#   tests       every CTest test, CPU and GPU                                → OUT/ctest.log
#   sanitizers  compute-sanitizer memcheck, racecheck and synccheck on small awkward shapes of
#               every single-GPU stage, causal and not                        → OUT/sanitizer.log
#   tour        the course tour; its results files                           → OUT/results/, OUT/tour.log
#   speed       before and after: the top rung of stages 04-12 at the FlashAttention papers' shape
#               (B·N = 16384 tokens, H·D = 2048, N = 4096; decoding at 8k and 32k keys) from the
#               build in FA_BASELINE_BUILD (a build of an earlier commit) and from build-gpu, twice
#               each, interleaved, in one run on one GPU                      → OUT/speed/, its table
#
# FA_GPU_CHECK_PARTS picks the parts (default "tests sanitizers tour"; "speed" runs only when
# asked, with FA_BASELINE_BUILD set). The build folder is kept, so running the parts one at a time
# rebuilds nothing. COMMIT names the source commit in the results files: give it where the checkout
# has no .git (take it from `git rev-parse --short=12 HEAD` where you commit).
# The last lines printed are the summary; the exit status is 0 only when every part that ran passed.
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT [COMMIT]}
commit=${2:-}
mkdir -p "$out"
build="build-gpu"
t0=$SECONDS
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps" \
      -DCMAKE_CUDA_ARCHITECTURES=90 ${commit:+-DFA_GIT_COMMIT=$commit} > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
cmake --build $build -j"$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
parts=${FA_GPU_CHECK_PARTS:-tests sanitizers tour}
has() { [[ " $parts " == *" $1 "* ]]; }
failed=0
summary=()

# Four tests at a time (FA_CTEST_JOBS): on an H100 the whole suite took 298 s one at a time and
# about 130 s four at a time, with the same results.
if has tests; then
  ctest --test-dir $build -j "${FA_CTEST_JOBS:-4}" --output-on-failure > "$out/ctest.log" 2>&1
  rc=$?
  echo "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log") ($((SECONDS - t0)) s)"
  grep -E "^\s+[0-9]+ - .*(Failed|Not Run|Skipped)" "$out/ctest.log" | head -20
  summary+=("ctest exit $rc")
  [ $rc -eq 0 ] || failed=1
fi

if has sanitizers; then  # its body is not indented: it holds the list of cases, a here-document
small="--sweep 1,77,130 --heads 2 --reps 1 --warmup 0"
bad=0
{
  # One line per case: the stage's folder, then its arguments; each runs causal and not, under each
  # tool. Stage 07: every rung of its ladder, then its other head dims, fp16, Nq != Nk both ways;
  # stage 08 the same (its backward after stage 07's forward); stage 09 at D = 64 and 128; stage 11
  # split over a cluster, three query rows on grouped heads; stage 12 grouped, and a packed batch
  # with lengths off every tile and a sequence of one token. Stage 13 needs two GPUs: its own
  # script (steps/13_ring_attention/lab/run_on_gpu.sh) runs its sanitizers.
  while read -r stage args; do
    exe=$build/steps/$stage/step${stage%%_*}_${stage#*_}
    if [ ! -x "$exe" ]; then
      echo "== $exe: not built"
      bad=1
      continue
    fi
    for causal in "" "--causal"; do
      for tool in memcheck racecheck synccheck; do
        echo "== $tool $exe $args $causal"
        # shellcheck disable=SC2086  # $args and $causal are lists of flags
        compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $args $causal --no-verify </dev/null 2>&1 \
          | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard"
        rc=${PIPESTATUS[0]}
        [ "$rc" -ne 0 ] && { echo "   exit $rc"; bad=1; }
      done
    done
  done <<CASES
03_cuda_naive $small
04_cuda_flash_forward $small
05_cuda_causal $small
06_cuda_backward $small
07_tensor_cores $small --ladder
07_tensor_cores --heads 2 --reps 1 --warmup 0 --dim 128 --dtype float16 --seq-q 300 --seq-k 129
07_tensor_cores --heads 2 --reps 1 --warmup 0 --dim 256 --seq-q 129 --seq-k 300
07_tensor_cores --heads 2 --reps 1 --warmup 0 --dim 96 --dtype float16 --seq 100
07_tensor_cores --heads 2 --reps 1 --warmup 0 --dim 32 --seq-q 77 --seq-k 200
08_tensor_core_backward $small
08_tensor_core_backward --heads 2 --reps 1 --warmup 0 --dim 128 --dtype float16 --seq-q 300 --seq-k 129
08_tensor_core_backward --heads 2 --reps 1 --warmup 0 --dim 96 --seq 100
08_tensor_core_backward --heads 2 --reps 1 --warmup 0 --dim 32 --seq-q 77 --seq-k 200
08_tensor_core_backward --heads 2 --reps 1 --warmup 0 --dim 256 --seq-q 129 --seq-k 300
09_hopper $small
09_hopper --heads 2 --reps 1 --warmup 0 --dim 128 --dtype float16 --seq-q 300 --seq-k 129
11_decoding --variant split_kv_cluster_merge --sweep 1,77,4097 --heads 8 --heads-kv 2 --seq-q 3 --batch 2 --splits 7 --reps 1 --warmup 0
12_variable_lengths --seq 300 --heads 8 --heads-kv 2 --dim 128 --reps 1 --warmup 0
12_variable_lengths --seq-lens 77,1,300,128 --heads 8 --heads-kv 2 --dim 64 --reps 1 --warmup 0
CASES
} > "$out/sanitizer.log" 2>&1
echo "sanitizers: $(grep -c '^== ' "$out/sanitizer.log") runs, $(grep -cE 'ERROR SUMMARY: 0 errors|0 hazards' "$out/sanitizer.log") clean summaries, $([ $bad = 0 ] && echo clean || echo FAILED: see sanitizer.log) ($((SECONDS - t0)) s)"
summary+=("sanitizers $([ $bad = 0 ] && echo clean || echo FAILED)")
[ $bad = 0 ] || failed=1
fi

if has tour; then
  python3 tools/tour.py --source . --build $build --results "$out/results" --plots "$out/plots" --plot-python "" \
    > "$out/tour.log" 2>&1
  rc=$?
  sed -n '/tour finished/,$p' "$out/tour.log"
  summary+=("tour exit $rc")
  [ $rc -eq 0 ] || failed=1
fi

if has speed; then  # its body is not indented: it holds the list of cases, a here-document
old=${FA_BASELINE_BUILD:?the speed part compares with FA_BASELINE_BUILD, a build of the earlier commit}
speed="$out/speed"
mkdir -p "$speed"
reps="--reps 20 --warmup 3 --no-verify"
# One line per case: a name, the executable under the new build, the one under the baseline build
# (its name before stages were renumbered, where it had another), then the arguments. The new
# executable's arguments follow a `|`; where the baseline took others (stage 12's prefill was
# `--prefill` of the decoding stage), they follow a second `|`.
cases=$(cat <<CASES
04_d64 | steps/04_cuda_flash_forward/step04_cuda_flash_forward | steps/04_cuda_flash_forward/step04_cuda_flash_forward | --batch 4 --heads 32 --seq 4096 --dim 64
04_d128 | steps/04_cuda_flash_forward/step04_cuda_flash_forward | steps/04_cuda_flash_forward/step04_cuda_flash_forward | --batch 4 --heads 16 --seq 4096 --dim 128
05_d64 | steps/05_cuda_causal/step05_cuda_causal | steps/05_cuda_causal/step05_cuda_causal | --batch 4 --heads 32 --seq 4096 --dim 64 --causal
05_d128 | steps/05_cuda_causal/step05_cuda_causal | steps/05_cuda_causal/step05_cuda_causal | --batch 4 --heads 16 --seq 4096 --dim 128 --causal
06_d64 | steps/06_cuda_backward/step06_cuda_backward | steps/06_cuda_backward/step06_cuda_backward | --batch 4 --heads 32 --seq 4096 --dim 64 --variant flash
06_d128_causal | steps/06_cuda_backward/step06_cuda_backward | steps/06_cuda_backward/step06_cuda_backward | --batch 4 --heads 16 --seq 4096 --dim 128 --causal --variant flash
07_d64 | steps/07_tensor_cores/step07_tensor_cores | steps/07_tensor_cores/step07_tensor_cores | --batch 4 --heads 32 --seq 4096 --dim 64 --dtype bfloat16
07_d128_causal | steps/07_tensor_cores/step07_tensor_cores | steps/07_tensor_cores/step07_tensor_cores | --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bfloat16 --causal
08_d64 | steps/08_tensor_core_backward/step08_tensor_core_backward | steps/08_tensor_core_backward/step08_tensor_core_backward | --batch 4 --heads 32 --seq 4096 --dim 64 --dtype bfloat16
08_d128_causal | steps/08_tensor_core_backward/step08_tensor_core_backward | steps/08_tensor_core_backward/step08_tensor_core_backward | --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bfloat16 --causal
09_d64 | steps/09_hopper/step09_hopper | steps/09_hopper/step09_hopper | --batch 4 --heads 32 --seq 4096 --dim 64 --dtype bfloat16
09_d128 | steps/09_hopper/step09_hopper | steps/09_hopper/step09_hopper | --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bfloat16
09_d128_causal | steps/09_hopper/step09_hopper | steps/09_hopper/step09_hopper | --batch 4 --heads 16 --seq 4096 --dim 128 --dtype bfloat16 --causal
11_8k | steps/11_decoding/step11_decoding | steps/10_inference/step10_inference | --batch 1 --heads 32 --heads-kv 8 --seq-q 1 --seq-k 8k --dim 128
11_32k | steps/11_decoding/step11_decoding | steps/10_inference/step10_inference | --batch 1 --heads 32 --heads-kv 8 --seq-q 1 --seq-k 32k --dim 128
12_prefill_causal | steps/12_variable_lengths/step12_variable_lengths | steps/10_inference/step10_inference | --seq 4k --heads 32 --heads-kv 8 --dim 128 --causal | --prefill --seq 4k --heads 32 --heads-kv 8 --dim 128 --causal
CASES
)
run_build() {  # run_build DIR TAG: every case once, its results file OUT/speed/TAG_NAME.json
  local dir=$1 tag=$2 name new was args old_args exe
  while IFS='|' read -r name new was args old_args; do
    name=${name// /} new=${new// /} was=${was// /}
    exe=$dir/$new
    if [ ! -x "$exe" ] && [[ $tag == old* ]]; then  # a baseline from before the renumbering
      exe=$dir/$was
      [ -n "${old_args// /}" ] && args=$old_args
    fi
    # shellcheck disable=SC2086  # $args and $reps are lists of flags
    "$exe" $args $reps --json "$speed/${tag}_$name.json" > "$speed/${tag}_$name.log" 2>&1 \
      || echo "$tag $name: exit $? ($exe)"
  done <<< "$cases"
}
for round in 1 2; do
  run_build "$old" "old$round"
  run_build "$build" "new$round"
done
python3 tools/speed_table.py "$speed" | tee "$speed/table.txt"
rc=${PIPESTATUS[0]}
summary+=("speed $([ "$rc" -eq 0 ] && echo 'within 2 %' || echo 'SLOWER or missing: see speed/table.txt')")
[ "$rc" -eq 0 ] || failed=1
fi

echo "gpu_check: ${summary[*]:-no part ran}; $((SECONDS - t0)) s"
exit $failed
