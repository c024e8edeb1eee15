#!/usr/bin/env bash
# device_check.sh — stage 11 on a GPU machine (an H100 for the figures the chapter quotes), after
# building step11_decoding, test_step11 and step09_hopper in BUILD_DIR. One summary line per step;
# logs and results go into one bundle in OUT_DIR, rewritten after every step (the device tool
# brings back at most 8 files, and a call cut short still brings back what was done).
#   steps/11_decoding/device_check.sh BUILD_DIR OUT_DIR [BASELINE_BUILD_DIR] [COMMIT]
# PARTS (default: all of them) picks what runs, in this order: tests, stage09 (before and after;
# needs BASELINE_BUILD_DIR), splits (the number of
# splits at batch 1 with each merge, and the sanitizers on the two one-launch merges), profile
# (Nsight Compute on the split kernel at 8k keys), floor (read_cache, the plain read of the cache,
# beside the cluster merge at batch 1, three rounds, and a run of read_cache under memcheck), decode
# (the comparison beside PyTorch, the longest step), stream (decoding steps back to back, plain and with
# programmatic dependent launch, beside SDPA in a CUDA graph: step11_stream and
# tools/compare_decode_stream.py, with the sanitizers on the overlapped steps).
# SKIP_DECODE=1 is PARTS without decode. STEP_TIMEOUT=S stops any one step after S seconds (its log
# so far still goes into the bundle).
# BASELINE_BUILD_DIR: a build of the commit before stage 09's kernels took grouped heads (its
# step09_hopper), timed in turn with this one's: what the change costs multi-head attention.
set -uo pipefail
b=$1 bundle=$2/step11_device_check.tgz base=${3:-} commit=${4:-unknown}
out=$b/device_check_10
rm -rf $out && mkdir -p $out
exe=$b/steps/11_decoding/step11_decoding
parts=${PARTS:-tests stage09 splits profile floor decode stream}
[ -n "${SKIP_DECODE:-}" ] && parts=${parts//decode/}
want() { [[ " $parts " == *" $1 "* ]]; }
source "$(dirname "$0")/../../tools/device_step.sh"  # run NAME COMMAND...: one step, its log, the bundle

want tests && run test_step11 $b/steps/11_decoding/test_step11
# Stage 09 before and after, in turn, twice: the multi-head forward that the grouped heads must not slow.
if want stage09 && [ -n "$base" ]; then
  for round in 1 2; do
    for which in base new; do
      dir=$([ $which = base ] && echo $base || echo $b)
      run stage09_${which}_$round $dir/steps/09_hopper/step09_hopper --paper-shapes --dim 128 --sweep 4k,16k --reps 20 --json $out/step09_${which}_$round.json
    done
  done
fi
# The number of splits at batch 1 for each merge: the sweep that chose "half the GPU's slots" ran
# with the warp-per-row merge, whose cost grows with the splits (docs/results/step11_splits_h100.txt).
# Timing only (--no-verify: test_step11 and the sanitizer runs below check every merge). Also the
# last block's merge under the sanitizers (its counters and fences).
if want splits; then
  for merge in split_kv_block_merge split_kv_fused_merge; do
    for nk in 8k 16k 32k; do
      for splits in 4 9 16 33 66; do
        run splits_${merge}_${nk}_$splits $exe --variant $merge --splits $splits --seq-k $nk --reps 50 \
            --no-verify --json $out/step11_splits_${merge}_${nk}_$splits.json
      done
    done
  done
  # The cluster merge: 8 splits is a cluster's portable size (what it chooses at most); 9-16 are
  # "non-portable" clusters, which the H100 holds fewer of at once (the run's last lines say how many).
  for nk in 8k 16k 32k; do
    for splits in 4 8 9 12 16; do
      run splits_split_kv_cluster_merge_${nk}_$splits $exe --variant split_kv_cluster_merge --splits $splits --seq-k $nk \
          --reps 50 --no-verify --json $out/step11_splits_split_kv_cluster_merge_${nk}_$splits.json
    done
  done
  for tool in memcheck racecheck synccheck; do  # 7 splits, and a 16-block cluster
    run ${tool}_cluster16 compute-sanitizer --tool $tool $exe --variant split_kv_cluster_merge --sweep 1,4097 --heads 8 \
        --heads-kv 2 --seq-q 3 --batch 2 --splits 16 --causal --reps 1 --warmup 0
    run ${tool}_cluster compute-sanitizer --tool $tool $exe --variant split_kv_cluster_merge --sweep 1,77,4097 --heads 8 \
        --heads-kv 2 --seq-q 3 --batch 2 --splits 7 --causal --reps 1 --warmup 0
  done
  run memcheck_fused compute-sanitizer --tool memcheck $exe --variant split_kv_fused_merge --sweep 1,77,4097 --heads 8 --heads-kv 2 --batch 2 --splits 7 --reps 2 --warmup 1
  run racecheck_fused compute-sanitizer --tool racecheck $exe --variant split_kv_fused_merge --seq-k 2000 --heads 8 --heads-kv 1 --seq-q 3 --splits 5 --reps 1 --warmup 0
  run synccheck_fused compute-sanitizer --tool synccheck $exe --variant split_kv_fused_merge --seq-k 2000 --heads 8 --heads-kv 1 --seq-q 3 --splits 5 --reps 1 --warmup 0
fi
# Where the split kernel's time goes at batch 1 and 8k keys (the goal it misses): Nsight Compute on
# one launch of the block merge's split kernel at the rule's splits and at 16, the GPU's own clocks
# (--clock-control none, as the timed runs), the memory and the warps' stalls.
if want profile; then
  for splits in 9 16; do
    run ncu_decode_$splits ncu --clock-control none -k regex:flash_decode_kernel --launch-count 1 --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats \
        $exe --variant split_kv_block_merge --splits $splits --seq-k 8k --reps 1 --warmup 0 --no-verify
    grep -E "^\s+(Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall Long Scoreboard|Registers Per Thread)\s" \
        $out/ncu_decode_$splits.log | awk '{$1=$1};1' | tr '\n' ';'; echo
  done
fi
# The floor: read_cache runs beside every decoding case; three rounds of the fastest merge at batch 1
# give it three times per cache length, in the same process as the step it bounds.
if want floor; then
  for round in 1 2 3; do
    run floor_$round $exe --variant split_kv_cluster_merge --sweep 8k,16k,32k,128k --reps 50 --no-verify \
        --json $out/step11_floor_$round.json
  done
  run memcheck_read_cache compute-sanitizer --tool memcheck $exe --variant one_split --sweep 1,77,4097 --heads 8 \
      --heads-kv 2 --seq-q 3 --batch 2 --reps 1 --warmup 0
fi
# Decoding beside PyTorch, every merge (the JSON the chapter's figures come from): batch 1 up to 128k
# keys, then batch 16 up to 32k (at 128k its stage 07 comparison on repeated heads alone needs 34 GB
# and most of a call: the run of 2026-11-26 stopped there).
if want decode; then
  run compare_decode python3 tools/compare_decode.py --exe $exe --json $out/compare_11_decode_h100.json --commit $commit --batch 1 --seq-k 8k,16k,32k,128k --stage-timeout 300
  run compare_decode_b16 python3 tools/compare_decode.py --exe $exe --json $out/compare_11_decode_b16_h100.json --commit $commit --batch 16 --seq-k 8k,16k,32k --stage-timeout 300
fi
# Decoding as a model runs it, one layer's step after another (32 layers, each its own cache):
# step11_stream's steps alone, back to back and overlapped, beside SDPA with the 32 calls in one CUDA
# graph; the overlapped steps under the three sanitizers (their outputs checked bit for bit).
if want stream; then
  stream=$b/steps/11_decoding/step11_stream
  run compare_stream python3 tools/compare_decode_stream.py --exe $stream --json $out/compare_11_stream_h100.json \
      --commit $commit --stage-timeout 300
  for tool in memcheck racecheck synccheck; do
    run ${tool}_stream compute-sanitizer --tool $tool --error-exitcode 99 $stream --layers 2 --reps 1 1000 4k
  done
fi
python3 - $out/*.json <<'PY' 2>/dev/null
import json, sys
for path in sys.argv[1:]:
    try: rows = json.load(open(path))["results"]
    except Exception: continue
    for r in rows:
        sm = r.get("split_ms") or {}
        print(f"{path.split('/')[-1]:30} {r['stage']:>6} {r['variant']:22} B={r['batch']} N={r['seq_q']}x{r['seq_k']} c={int(r['causal'])} "
              f"{r['status']:4} {r.get('median_ms') or 0:9.4f} ms {r.get('tflops') or 0:7.1f} TF/s {' '.join(f'{k}={v:.4f}' for k, v in sm.items())}")
PY
(cd $out && tar czf $bundle .)
