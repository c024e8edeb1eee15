#!/usr/bin/env bash
# run_on_gpu.sh — stage 11 on a GPU machine: its tests, and the measurements chapter 11 quotes. Each
# step's log and the results files go to OUT; one line per step says how it ended; the exit status
# counts the failures.
#   steps/11_decoding/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [COMMIT (recorded by the comparisons)]
# Build first: cmake --build BUILD_DIR --target step11_decoding step11_stream test_step11
# PARTS (default: all of them) picks what runs, in this order:
#   tests    test_step11, the stage's CTest cases, and every rung of the merge under the sanitizers;
#   splits   the number of splits at batch 1 with each merge (timing only: tests checks every merge);
#   profile  Nsight Compute on one launch of the split kernel at 8k keys;
#   floor    read_cache (the plain read of the cache) beside the cluster merge at batch 1, three rounds;
#   decode   the comparison beside PyTorch (tools/compare_decode.py; needs PyTorch);
#   stream   decoding steps back to back and overlapped (step11_stream) beside SDPA in a CUDA graph
#            (tools/compare_decode_stream.py; needs PyTorch), and the overlapped steps under the sanitizers.
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [COMMIT]} build=${2:-build}
commit=${3:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
exe=$build/steps/11_decoding/step11_decoding
stream=$build/steps/11_decoding/step11_stream
parts=${PARTS:-tests splits profile floor decode stream}
want() { [[ " $parts " == *" $1 "* ]]; }
mkdir -p "$out"
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"
have_torch() { python3 -c "import torch" 2>/dev/null || { echo "$1: skipped (no PyTorch)"; false; }; }

if want tests; then
  run test_step11 "$build/steps/11_decoding/test_step11"
  run ctest_step11 ctest --test-dir "$build" -R "step11" --output-on-failure
  # Every rung of the merge on awkward shapes: 7 splits, caches of 1, 77 and 4097 keys, three queries.
  for variant in split_kv split_kv_block_merge split_kv_fused_merge split_kv_cluster_merge; do
    run memcheck_$variant compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --variant $variant \
        --sweep 1,77,4097 --heads 8 --heads-kv 2 --seq-q 3 --batch 2 --splits 7 --causal --reps 2 --warmup 1
  done
  for tool in racecheck synccheck; do
    run ${tool}_fused compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --variant split_kv_fused_merge \
        --seq-k 2000 --heads 8 --heads-kv 1 --seq-q 3 --splits 5 --reps 1 --warmup 0
    run ${tool}_cluster compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --variant split_kv_cluster_merge \
        --sweep 1,77,4097 --heads 8 --heads-kv 2 --seq-q 3 --batch 2 --splits 7 --causal --reps 1 --warmup 0
  done
  for tool in memcheck racecheck synccheck; do  # a 16-block cluster (non-portable)
    run ${tool}_cluster16 compute-sanitizer --tool $tool --error-exitcode 99 "$exe" --variant split_kv_cluster_merge \
        --sweep 1,4097 --heads 8 --heads-kv 2 --seq-q 3 --batch 2 --splits 16 --causal --reps 1 --warmup 0
  done
  run memcheck_read_cache compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --variant one_split \
      --sweep 1,77,4097 --heads 8 --heads-kv 2 --seq-q 3 --batch 2 --reps 1 --warmup 0
fi
# The number of splits at batch 1 for each merge (the rule of "How many splits" was set with the
# warp-per-row merge, whose cost grows with the splits). 9-16 blocks a cluster are "non-portable"
# clusters, which the H100 holds fewer of at once (the run's last lines say how many).
if want splits; then
  for merge in split_kv_block_merge split_kv_fused_merge; do
    for nk in 8k 16k 32k; do
      for splits in 4 9 16 33 66; do
        run splits_${merge}_${nk}_$splits "$exe" --variant $merge --splits $splits --seq-k $nk --reps 50 \
            --no-verify --json "$out/step11_splits_${merge}_${nk}_$splits.json"
      done
    done
  done
  for nk in 8k 16k 32k; do
    for splits in 4 8 9 12 16; do
      run splits_split_kv_cluster_merge_${nk}_$splits "$exe" --variant split_kv_cluster_merge --splits $splits \
          --seq-k $nk --reps 50 --no-verify --json "$out/step11_splits_split_kv_cluster_merge_${nk}_$splits.json"
    done
  done
fi
# Where the split kernel's time goes at batch 1 and 8k keys: one launch of the block merge's split
# kernel at the rule's splits and at 16, the GPU's own clocks (as the timed runs), the memory and
# the warps' stalls.
if want profile; then
  for splits in 9 16; do
    run ncu_decode_$splits ncu --clock-control none -k regex:flash_decode_kernel --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        "$exe" --variant split_kv_block_merge --splits $splits --seq-k 8k --reps 1 --warmup 0 --no-verify
  done
fi
# The floor: read_cache runs beside every decoding case; three rounds of the fastest merge at batch 1
# give it three times per cache length, in the same process as the step it bounds.
if want floor; then
  for round in 1 2 3; do
    run floor_$round "$exe" --variant split_kv_cluster_merge --sweep 8k,16k,32k,128k --reps 50 --no-verify \
        --json "$out/step11_floor_$round.json"
  done
fi
# Decoding beside PyTorch, every merge (the file the chapter's figures come from): batch 1 up to 128k
# keys, then batch 16 up to 32k.
if want decode && have_torch decode; then
  run compare_decode python3 tools/compare_decode.py --exe "$exe" --json "$out/compare_11_decode.json" --commit "$commit" \
      --batch 1 --seq-k 8k,16k,32k,128k --stage-timeout 300
  run compare_decode_b16 python3 tools/compare_decode.py --exe "$exe" --json "$out/compare_11_decode_b16.json" \
      --commit "$commit" --batch 16 --seq-k 8k,16k,32k --stage-timeout 300
fi
# Decoding as a model runs it, one layer's step after another (32 layers, each its own cache).
if want stream; then
  if have_torch stream; then
    run compare_stream python3 tools/compare_decode_stream.py --exe "$stream" --json "$out/compare_11_stream.json" \
        --commit "$commit" --stage-timeout 300
  fi
  for tool in memcheck racecheck synccheck; do
    run ${tool}_stream compute-sanitizer --tool $tool --error-exitcode 99 "$stream" --layers 2 --reps 1 1000 4k
  done
fi
# One line per measured row of this run's results.
python3 - "$out"/*.json <<'PY' 2>/dev/null
import json, sys
for path in sys.argv[1:]:
    try: rows = json.load(open(path))["results"]
    except Exception: continue
    for r in rows:
        sm = r.get("split_ms") or {}
        print(f"{path.split('/')[-1]:30} {r['stage']:>6} {r['variant']:22} B={r['batch']} N={r['seq_q']}x{r['seq_k']} c={int(r['causal'])} "
              f"{r['status']:4} {r.get('median_ms') or 0:9.4f} ms {' '.join(f'{k}={v:.4f}' for k, v in sm.items())}")
PY
echo "$failures step(s) failed"
exit $((failures > 0))
