#!/usr/bin/env bash
# tools/gpu_check.sh OUT [COMMIT] — everything a GPU machine must prove, in one go:
# build for sm_90, every test (CPU and GPU), compute-sanitizer memcheck, racecheck and synccheck on
# small awkward shapes of every GPU stage, then the course tour, whose results files land in OUT/results.
# The last lines printed are the summary. FA_GPU_CHECK_PARTS picks the parts after the build
# (default "tests sanitizers tour"): one device call's time limit holds the build and the tests but
# not all three, so run "tests" in one call and "sanitizers" in the next, on the same warm machine
# (its build folder is kept, so the second build is a no-op). COMMIT names the source commit: take it from `git rev-parse
# --short=12 HEAD` where you commit, not on the device (its copy of the repository may have an older HEAD).
set -uo pipefail
out=${1:?usage: gpu_check.sh OUT [COMMIT]}
commit=${2:-}
mkdir -p "$out"
build="build-gpu"
t0=$SECONDS
cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PWD/.deps" \
      -DCMAKE_CUDA_ARCHITECTURES=90 ${commit:+-DFA_GIT_COMMIT=$commit} > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
cmake --build $build -j16 > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "build: $((SECONDS - t0)) s"
parts=${FA_GPU_CHECK_PARTS:-tests sanitizers tour}
[ "${FA_GPU_CHECK_TOUR:-1}" = 0 ] && parts=${parts/tour/}
has() { [[ " $parts " == *" $1 "* ]]; }
ctest_rc="not run"
sanitizer_bad="not run"

# Four tests at a time (FA_CTEST_JOBS): on an H100 the whole suite took 298 s one at a time and
# about 130 s four at a time, with the same results (2026-11-25).
if has tests; then
  ctest --test-dir $build -j "${FA_CTEST_JOBS:-4}" --output-on-failure > "$out/ctest.log" 2>&1
  ctest_rc=$?
  echo "ctest: $(grep -E 'tests passed|tests failed' "$out/ctest.log") ($((SECONDS - t0)) s)"
  grep -E "^\s+[0-9]+ - .*(Failed|Not Run|Skipped)" "$out/ctest.log" | head -20
fi

if has sanitizers; then  # its body is not indented: it holds the list of cases, a here-document
small="--sweep 1,77,130 --heads 2 --reps 1 --warmup 0"
sanitizer_bad=0
{
  # One line per case: the stage's folder, then its arguments; each runs causal and not, under each
  # tool. Stage 07: every rung of its ladder, then its other head dims, fp16, Nq != Nk both ways;
  # stage 08 the same (its backward after stage 07's forward); stage 09 at D = 64 and 128.
  while read -r stage args; do
    exe=$build/steps/$stage/step${stage%%_*}_${stage#*_}
    for causal in "" "--causal"; do
      for tool in memcheck racecheck synccheck; do
        echo "== $tool $exe $args $causal"
        # shellcheck disable=SC2086  # $args and $causal are lists of flags
        compute-sanitizer --tool $tool --error-exitcode 99 "$exe" $args $causal --no-verify </dev/null 2>&1 \
          | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|hazard"
        rc=${PIPESTATUS[0]}
        [ "$rc" -ne 0 ] && { echo "   exit $rc"; sanitizer_bad=1; }
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
CASES
} > "$out/sanitizer.log" 2>&1
echo "sanitizers: $(grep -c '^== ' "$out/sanitizer.log") runs, $(grep -cE 'ERROR SUMMARY: 0 errors|0 hazards' "$out/sanitizer.log") clean, failing: $sanitizer_bad ($((SECONDS - t0)) s)"
fi
sanitizers() { case $sanitizer_bad in 0) echo clean ;; 1) echo FAILED ;; *) echo "$sanitizer_bad" ;; esac; }

if ! has tour; then  # the tour in a call of its own (a device call's time limit)
  echo "gpu_check: ctest exit $ctest_rc, sanitizers $(sanitizers), tour not run, $((SECONDS - t0)) s"
  exit 0
fi
python3 tools/tour.py --source . --build $build --results "$out/results" --plots "$out/plots" --plot-python "" \
  > "$out/tour.log" 2>&1
tour_rc=$?
sed -n '/tour finished/,$p' "$out/tour.log"
tar -C "$out" -czf "$out/results.tgz" results && rm -rf "$out/results"
echo "gpu_check: ctest exit $ctest_rc, tour exit $tour_rc, sanitizers $(sanitizers), $((SECONDS - t0)) s"
