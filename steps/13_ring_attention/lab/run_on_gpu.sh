#!/usr/bin/env bash
# run_on_gpu.sh — stage 13 on a GPU machine: its tests and the ring's checks on one GPU (rings of 1-4
# ranks by the copy transport, the CLI tests, compute-sanitizer), and with two GPUs or more the
# measurements chapter 13 quotes: NCCL against float64 and the copy transport, the forward's and the
# backward's times on two GPUs against the ring on one (128k and 256k tokens, causal and not), and
# the measured timelines of the chapter's figure. `long` instead runs a sequence too long for one
# GPU on one GPU (out of memory) and on two; `long4` one too long for two GPUs, on two and on four.
# `four fwd` and `four bwd` (four GPUs or more) measure the ring on 4 GPUs beside 2 and beside the
# single-GPU kernel at 256k, 512k and 1M tokens, causal (zigzag and contiguous) and not, the
# forward's error against float64 and one ring step's timeline. Each step's log and the results files go to OUT; one line per step says how it ended;
# the exit status counts the failures.
#   steps/13_ring_attention/lab/run_on_gpu.sh OUT [BUILD_DIR (default build)] [all|long|long4|four (default all)] [fwd|bwd]
#       [causal|full|both (four: which masks, default both)]
# Build first: cmake --build BUILD_DIR --target step13_ring_attention test_step13 test_step13_two_gpus
#              test_ring_exchange test_ring_exchange_nccl
set -uo pipefail
out=${1:?usage: run_on_gpu.sh OUT [BUILD_DIR] [all|long|long4|four] [fwd|bwd] [causal|full|both]} build=${2:-build} mode=${3:-all} pass=${4:-fwd} masks=${5:-both}
s=$build/steps/13_ring_attention
exe=$s/step13_ring_attention
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0  # NVLink multicast off: the ring sends point to point
failures=0
# run and merge: tools/lab_steps.sh
source "$(dirname "$0")/../../../tools/lab_steps.sh"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader >"$out/gpus.txt"

if [ "$mode" = all ]; then
  run test_ring_exchange "$build/common/cuda/test_ring_exchange"
  run test_step13 "$s/test_step13"
  run ctest_step13 ctest --test-dir "$build" -R "step13|ring_exchange" --output-on-failure
  # The sanitizers on a ring of ranks that share one GPU, at lengths off every tile.
  run memcheck_fwd compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --gpus 3 --transport copy --sweep 77,300 \
      --heads 2 --dim 64 --causal --reps 1 --warmup 0
  run memcheck_bwd compute-sanitizer --tool memcheck --error-exitcode 99 "$exe" --backward --gpus 3 --transport copy \
      --sweep 77,300 --heads 2 --dim 128 --causal --reps 1 --warmup 0
  run racecheck_fwd compute-sanitizer --tool racecheck --error-exitcode 99 "$exe" --gpus 2 --transport copy --seq 200 \
      --heads 2 --dim 64 --reps 1 --warmup 0 --no-verify
  run synccheck_bwd compute-sanitizer --tool synccheck --error-exitcode 99 "$exe" --backward --gpus 2 --transport copy \
      --seq 200 --heads 2 --dim 64 --reps 1 --warmup 0 --no-verify
  if [ "$gpus" -ge 2 ]; then
    run test_ring_exchange_nccl "$build/common/cuda/test_ring_exchange_nccl"
    run test_step13_two_gpus "$s/test_step13_two_gpus"
    # The forward, verified on every case (float64 on sampled rows, the single-GPU kernel on every
    # row): --gpus 2 runs every variant; --gpus 1 the ring alone.
    for causal in "--causal" ""; do
      c=${causal:+_causal}
      run fwd${c}_g2 "$exe" --gpus 2 --sweep 128k,256k $causal --reps 5 --warmup 1 --json "$out/step13_fwd${c}_g2.json"
      run fwd${c}_g1 "$exe" --gpus 1 --variant ring --sweep 128k,256k $causal --reps 3 --warmup 1 --json "$out/step13_fwd${c}_g1.json"
    done
    # The backward's float64 check reads every key for every sampled row's dK/dV: hours at 128k on
    # the CPU, so the ring is verified at 8k (and in test_step13_two_gpus) and timed beyond without it.
    for causal in "--causal" ""; do
      c=${causal:+_causal}
      run verify_bwd$c "$exe" --backward --gpus 2 --variant ring --seq 8k $causal --reps 1 --warmup 0
      run bwd${c}_g2 "$exe" --backward --gpus 2 --seq 128k $causal --reps 3 --warmup 1 --no-verify --json "$out/step13_bwd${c}_g2.json"
      run bwd${c}_g2_256k "$exe" --backward --gpus 2 --variant ring --seq 256k $causal --reps 3 --warmup 1 --no-verify \
          --json "$out/step13_bwd${c}_g2_256k.json"
      run bwd${c}_g1 "$exe" --backward --gpus 1 --variant ring --sweep 128k,256k $causal --reps 3 --warmup 1 --no-verify \
          --json "$out/step13_bwd${c}_g1.json"
    done
    # The measured timelines (chapter 13's figure): causal, 128k, the hops under the steps and after them.
    for pass in "" "--backward"; do
      p=$([ -n "$pass" ] && echo bwd || echo fwd)
      run timeline_$p "$exe" --gpus 2 --seq 128k --causal $pass --timeline "$out/step13_timeline_${p}.json"
      run timeline_${p}_serial "$exe" --gpus 2 --seq 128k --causal $pass --no-overlap --timeline "$out/step13_timeline_${p}_serial.json"
    done
  else
    echo "two-GPU steps: skipped (one GPU)"
  fi
elif [ "$mode" = long ] || [ "$mode" = long4 ]; then
  # long: a sequence one GPU cannot hold, on one GPU (out of memory) and on two; long4: one that two
  # GPUs cannot hold, on two and on four.
  few=1 many=2
  [ "$mode" = long4 ] && few=2 many=4
  [ "$gpus" -ge $many ] || { echo "$mode: needs $many GPUs"; exit 1; }
  # 10 % beyond what `few` GPUs hold, in 64k steps, from the measured memory per GPU of the ring on
  # `few` GPUs (this run's results, or the committed ones: the bytes per token do not depend on the GPU).
  if [ $few = 1 ]; then
    src=$out/step13_fwd_causal_g1.json
    [ -f "$src" ] || src=docs/results/step13_fwd_causal_g1_h200x2.json
  else
    src=$(ls "$out"/step13_fwd_causal*_g2.json 2>/dev/null | head -1)
    [ -n "$src" ] || src=docs/results/step13_four_h200x4/step13_fwd_causal_256k_512k_1M_g2.json
  fi
  long=$(python3 - "$src" <<'PY'
import json, subprocess, sys
rows = [r for r in json.load(open(sys.argv[1]))["results"] if r["variant"] == "ring" and r["status"] == "ok"]
r = max(rows, key=lambda r: r["seq_q"])
total = int(subprocess.check_output(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits", "-i", "0"]).split()[0]) << 20
n = 1.1 * total / (r["peak_bytes"] / r["seq_q"])
print(int(-(-n // 65536)) * 65536)
PY
)
  echo "long sequence: $long tokens" | tee "$out/long_seq.txt"
  # The harness keeps 2.5x Q, K, V, O on the host with the float64 check (its float32 copies), 1.5x
  # without: the check runs only where the host holds it.
  io=$((long * 16 * 128 * 2 * 4))
  mem=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024))
  verify=""
  [ $((mem * 8 / 10)) -lt $((io * 5 / 2)) ] && verify="--no-verify"
  echo "verification: ${verify:-float64 on sampled rows}" | tee -a "$out/long_seq.txt"
  # About 3 minutes on one GPU (out of memory after drawing the inputs) and 7 on two (two H200s);
  # long4 on four H200s: 7 733 248 tokens, two runs of about 100 s each (the causal forward at 1M
  # took 1.9 s there, and the time grows as N²) after the inputs are drawn.
  # --no-one-gpu: the single-GPU kernel would fit where the ring does not (no K/V blocks in flight,
  # no float32 accumulator) and take as long as the ring on one GPU.
  run long_g$few "$exe" --gpus $few --variant ring --no-one-gpu --seq $long --causal --reps 1 --warmup 0 --no-verify \
      --json "$out/step13_long_g$few.json"
  run long_g$many "$exe" --gpus $many --variant ring --no-one-gpu --seq $long --causal --reps 1 --warmup 0 $verify \
      --json "$out/step13_long_g$many.json"
elif [ "$mode" = four ]; then
  [ "$gpus" -ge 4 ] || { echo "four: needs four GPUs"; exit 1; }
  # What the CPU model predicts for the balance of 4 and 8 ranks (the critical path's pairs against
  # the ideal), to set beside the measured one.
  for g in 4 8; do
    for split in zigzag contiguous; do
      run model_g${g}_$split "$s/step13_ring_schedule" --gpus $g --seq 1M --causal --split $split --model-seq 0
    done
  done
  # The forward is verified on every case: float64 on sampled rows and the single-GPU kernel on
  # every row, so its logs carry the error of 1, 2 and 4 GPUs against the same float64 rows. The
  # backward's float64 check is run at 8k (hours at 256k on the CPU) and the long ones are timed.
  # Forward: --gpus 4 runs every variant (zigzag, serial, contiguous, one GPU); --gpus 2 the zigzag
  # ring. Backward: the zigzag ring beside one GPU, and causal, the contiguous split; its serial rung
  # is left to the two-GPU run (a run at 1M tokens is 13-50 s there). The single GPU's backward at
  # 1M tokens without the mask is about 50 s a run on an H200 (16 times its 3.3 s at 256k): run the
  # masks one at a time, and where a run must stay short, the lengths too:
  #   FOUR_SEQS (default 256k,512k,1M)   FOUR_RUNS (default "--reps 3 --warmup 1")
  #   FOUR_PARTS (default "g4 contiguous g2 timeline"): which of the runs below (to complete an earlier run)
  seqs=${FOUR_SEQS:-256k,512k,1M}
  read -r -a runs <<<"${FOUR_RUNS:---reps 3 --warmup 1}"
  parts=" ${FOUR_PARTS:-g4 contiguous g2 timeline} "
  part() { [[ "$parts" == *" $1 "* ]]; }
  case $masks in causal) cases=("--causal") ;; full) cases=("") ;; *) cases=("--causal" "") ;; esac
  for causal in "${cases[@]}"; do
    c=${causal:+_causal}
    tag=${pass}${c}_$(echo "$seqs" | tr , _)
    if [ "$pass" = fwd ]; then
      # shellcheck disable=SC2086  # causal is zero or one word
      part g4 && run ${tag}_g4 "$exe" --gpus 4 --sweep "$seqs" $causal "${runs[@]}" --json "$out/step13_${tag}_g4.json"
    else
      part g4 && run verify_bwd${c}_g4 "$exe" --backward --gpus 4 --variant ring --seq 8k $causal --reps 1 --warmup 0
      # shellcheck disable=SC2086
      part g4 && run ${tag}_g4 "$exe" --backward --no-verify --gpus 4 --variant ring --sweep "$seqs" $causal \
          "${runs[@]}" --json "$out/step13_${tag}_g4.json"
      # shellcheck disable=SC2086
      [ -n "$causal" ] && part contiguous && run ${tag}_g4_contiguous "$exe" --backward --no-verify --gpus 4 \
          --variant ring_contiguous --no-one-gpu --sweep "$seqs" $causal "${runs[@]}" \
          --json "$out/step13_${tag}_g4_contiguous.json"
    fi
    flag=$([ "$pass" = bwd ] && echo "--backward --no-verify")
    # shellcheck disable=SC2086  # flag is zero or two words
    part g2 && run ${tag}_g2 "$exe" $flag --gpus 2 --variant ring --no-one-gpu --sweep "$seqs" $causal "${runs[@]}" \
        --json "$out/step13_${tag}_g2.json"
  done
  # One ring step on 4 GPUs, measured: the hops under the blocks' compute, or not.
  backward=$([ "$pass" = bwd ] && echo --backward)
  # shellcheck disable=SC2086  # backward is zero or one word
  [ "$masks" != full ] && part timeline && run timeline_${pass}_g4 "$exe" --gpus 4 --seq 256k --causal $backward \
      --timeline "$out/step13_timeline_${pass}_g4.json"
else
  echo "run_on_gpu.sh: the third argument is all, long, long4 or four, not '$mode'" >&2
  exit 2
fi
# One line per measured row of this run's results.
python3 - "$out"/*.json <<'PY' 2>/dev/null
import json, sys
for path in sys.argv[1:]:
    try: rows = json.load(open(path))["results"]
    except Exception: continue
    for r in rows:
        print(f"{path.split('/')[-1]:28} {r['variant']:16} {r['pass']} N={r['seq_q']:>8} causal={int(r['causal'])} {r['status']:6} "
              f"{r.get('median_ms') or 0:10.2f} ms {r.get('tflops') or 0:7.1f} TFLOP/s peak/GPU {(r.get('peak_bytes') or 0) / 2**30:6.2f} GiB "
              f"verified={r.get('verification_ok')}")
PY
echo "$failures step(s) failed"
exit $((failures > 0))
