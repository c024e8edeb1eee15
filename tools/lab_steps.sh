# tools/lab_steps.sh — what every stage's lab/run_on_gpu.sh shares, sourced by it (not run):
#   run NAME COMMAND...   COMMAND's output into $out/NAME.log, one line of how it ended and how long
#                         it took; a non-zero exit adds one to $failures
#   merge OUT IN...       one results file whose "results" are all the inputs' rows, its "command"
#                         the inputs' commands joined by " ; "
# The caller sets $out (the folder the logs go to) and failures=0 before the first run.
run() {
  local name=$1
  shift
  local start=$SECONDS
  "$@" >"$out/$name.log" 2>&1
  local code=$?
  echo "$name: exit $code, $((SECONDS - start)) s"
  [ $code -eq 0 ] || failures=$((failures + 1))
}
merge() {
  python3 - "$@" <<'PY'
import json, sys
out, ins = sys.argv[1], sys.argv[2:]
docs = [json.load(open(p)) for p in ins]
merged = docs[0]
merged["results"] = [r for d in docs for r in d["results"]]
merged["command"] = " ; ".join(d.get("command", "") for d in docs)
json.dump(merged, open(out, "w"), indent=1)
PY
}
