#!/usr/bin/env bash
# device_run.sh — what stage 06's GPU runs did, in one place (build, tests, sanitizer, benchmarks,
# profile), so that every committed figure says which command made it.
#
#   steps/06_cuda_backward/scripts/device_run.sh OUT_DIR [test] [sanitize] [exercise] [bench-quick] [bench] [ncu]
#
# Logs and results go to a scratch folder, packed into OUT_DIR/results.tgz after every step (so
# that a run cut short still returns what it finished).
#
# test        ctest -R step06 (the stage's doctests and command-line checks)
# exercise    ex06: the starter must fail naming a TODO, the solution must pass
# sanitize    compute-sanitizer memcheck on a small causal case with tails (both dQ modes)
# bench-quick paper shapes (B·N = 16384 tokens, H·D = 2048) at N = 4096, D = 64 and 128, causal on/off
# bench       the same at N = 1024..8192 (the committed docs/results/step06_*.json), and --deterministic
#             (its rows are variant "flash-deterministic" in the results files)
# plots       docs/plots/plot_results.py over the bench results (needs matplotlib: the device has it)
# ncu         Nsight Compute on one key-tile kernel launch (D = 64 and 128, N = 4096), clocks left alone
set -o pipefail
dest=$1
shift
out=/tmp/step06_results
rm -rf $out && mkdir -p $out
pack() { tar czf $dest/results.tgz -C $out . ; }
build=build-gpu
exe=$build/steps/06_cuda_backward/step06_cuda_backward
summary=()
for what in "$@"; do
  case $what in
    test)
      ctest --test-dir $build -R step06 --output-on-failure > $out/ctest.log 2>&1
      summary+=("ctest: $(grep -E 'tests passed|tests failed' $out/ctest.log)")
      ;;
    sanitize)
      s=""
      for flag in "" --deterministic; do
        compute-sanitizer --tool memcheck $exe --seq-q 130 --seq-k 77 --heads 2 --dim 64 --causal \
          --reps 1 --warmup 0 $flag > $out/sanitizer$flag.log 2>&1
        s+="[$flag] rc=$? $(grep 'ERROR SUMMARY' $out/sanitizer$flag.log | tail -1) "
      done
      summary+=("sanitizer: $s")
      ;;
    bench-quick|bench)
      sweep=4096
      [ $what = bench ] && sweep=1024,2048,4096,8192
      for d in 64 128; do
        for c in "" --causal; do
          name=step06_d${d}${c:+_causal}
          $exe --paper-shapes --dim $d $c --sweep $sweep --json $out/$name.json > $out/$name.log 2>&1
          summary+=("$name rc=$?: $(grep -E '^ +[0-9]+x[0-9]+, ' $out/$name.log | tr -s ' ' | tr '\n' ';')")
        done
      done
      if [ $what = bench ]; then
        for d in 64 128; do
          name=step06_d${d}_causal_deterministic
          $exe --paper-shapes --dim $d --causal --deterministic --sweep 1024,4096 --json $out/$name.json > $out/$name.log 2>&1
          summary+=("$name rc=$?: $(grep -E '^ +[0-9]+x[0-9]+, ' $out/$name.log | tr -s ' ' | tr '\n' ';')")
        done
      fi
      ;;
    ncu)
      for d in 64 128; do
        ncu --clock-control none --kernel-name regex:backward_kv_kernel --launch-skip 2 --launch-count 1 \
          --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
          --section Occupancy --section WarpStateStats --section InstructionStats --section LaunchStats \
          $exe --paper-shapes --dim $d --causal --seq 4096 --reps 3 --warmup 0 --no-verify --variant flash \
          > $out/ncu_d$d.log 2>&1
        summary+=("ncu d$d rc=$?: $(grep -E 'Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Duration' $out/ncu_d$d.log | tr -s ' ' | tr '\n' ';')")
      done
      ;;
    plots)
      python3 docs/plots/plot_results.py $out/step06_d64.json $out/step06_d64_causal.json $out/step06_d128.json \
        $out/step06_d128_causal.json --out $out/plots --prefix step06 > $out/plots.log 2>&1
      summary+=("plots rc=$?: $(ls $out/plots 2>/dev/null | tr '\n' ' ')")
      ;;
    exercise)
      $build/exercises/06_cuda_backward/ex06_cuda_backward > $out/ex06_starter.log 2>&1
      r1=$?
      $build/solutions/06_cuda_backward/ex06_cuda_backward_solution > $out/ex06_solution.log 2>&1
      r2=$?
      summary+=("ex06: starter rc=$r1 ($(grep -o 'TODO(ex06:[a-z]*)' $out/ex06_starter.log | sort -u | tr '\n' ' ')), solution rc=$r2 ($(grep -E 'test cases' $out/ex06_solution.log))")
      ;;
  esac
  pack
done
echo "== summary"
printf '%s\n' "${summary[@]}"
