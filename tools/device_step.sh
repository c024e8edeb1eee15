# tools/device_step.sh — sourced by the stages' device_check.sh scripts: `run NAME COMMAND...` runs
# one step of a device call. Its output goes to $out/NAME.log; after the step the whole of $out is
# packed into $bundle (the device tool brings back at most 8 files, and a call cut short by its
# limit still brings back every step before); one summary line is printed (exit status, seconds,
# doctest counts, sanitizer summaries, PASS/FAIL), then any error lines. STEP_TIMEOUT=S stops the
# step after S seconds (0 or unset: no limit); `timeout -k` also ends the step's child processes.
run() {
  local name=$1 t0=$SECONDS
  shift
  timeout -k 10 "${STEP_TIMEOUT:-0}" stdbuf -oL -eL "$@" > "$out/$name.log" 2>&1
  local rc=$?
  (cd "$out" && tar czf "$bundle" .)
  echo "[rc=$rc, $((SECONDS - t0)) s] $name: $(grep -E '^\[doctest\] (test cases|assertions)|ERROR SUMMARY|RACECHECK SUMMARY|^(PASS|FAIL)' "$out/$name.log" | tr -s ' ' | tr '\n' ' ')"
  grep -B2 -A8 "ERROR:\|FAILED\|error:" "$out/$name.log" | head -30
}
