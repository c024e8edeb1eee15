#!/usr/bin/env bash
# Test of ./course's configure step: how FA_CMAKE_ARGS reaches cmake, and the next: line after a
# failed configure. A copy of the script runs in a scratch folder with stand-ins for cmake, dpkg
# and apt-get on PATH; the cmake stand-in records the arguments it gets, one per NUL-ended record.
# Shell-like splitting is checked against bash's own (eval, here only on the fixed texts below).
# Usage: course_cmake_args.sh PATH/TO/course     Exit code: 0 when every case holds, 1 otherwise.
set -euo pipefail
course=${1:?usage: course_cmake_args.sh PATH/TO/course}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0
fail() { printf 'FAIL: %s\n' "$*"; failures=$((failures + 1)); }

mkdir -p "$scratch/bin" "$scratch/tree"
cp "$course" "$scratch/tree/course"
# cmake --preset ...: record the arguments; print what a configure would and exit FAKE_CMAKE_RC.
# cmake --build ...: succeed (the tour's build and run are not what is tested here).
cat >"$scratch/bin/cmake" <<'EOF'
#!/usr/bin/env bash
if [ "${1:-}" = --preset ]; then
  printf '%s\0' "$@" >"$RECORD"
  printf '%s\n' "${FAKE_CMAKE_OUTPUT:--- Configuring done}"
  exit "${FAKE_CMAKE_RC:-0}"
fi
exit 0
EOF
printf '#!/bin/sh\nexit 0\n' >"$scratch/bin/dpkg"       # every package "installed"
printf '#!/bin/sh\nexit 1\n' >"$scratch/bin/apt-get"    # never called when nothing is missing
chmod +x "$scratch/bin/"*
export PATH="$scratch/bin:$PATH" RECORD="$scratch/args" FA_NO_INSTALL=1
unset CUDACXX

run_course() {  # run_course FA_CMAKE_ARGS-value: runs ./course tour; sets rc and out
  rm -f "$RECORD"
  rc=0
  out=$(cd "$scratch/tree" && FA_CMAKE_ARGS=$1 ./course tour 2>&1) || rc=$?
}
recorded() {  # the arguments cmake got after "--preset default", one per line, each in %q form
  local a=() x
  [ -f "$RECORD" ] || return 0
  while IFS= read -r -d '' x; do a+=("$x"); done <"$RECORD"
  for x in "${a[@]:2}"; do printf '%q\n' "$x"; done
}

# Texts the shell itself can split (no $ or backquotes): the course must split them the same way.
cases=(
  ''
  '-DFA_ENABLE_CUDA=OFF'
  '-DCMAKE_CXX_FLAGS="-O2 -g"'
  "-DCMAKE_CXX_FLAGS='-O2 -g' -DCMAKE_CUDA_ARCHITECTURES=90"
  '  -DA=1		-DB=2  '
  '-DA=one\ two "" -DB="say \"hi\" \\ \x" -DC=a"b c"d'"'e f'"
)
for value in "${cases[@]}"; do
  run_course "$value"
  eval "want=($value)"
  expected=$(for x in ${want[@]+"${want[@]}"}; do printf '%q\n' "$x"; done)
  got=$(recorded)
  if [ $rc -ne 0 ]; then
    fail "FA_CMAKE_ARGS=$(printf '%q' "$value"): exit $rc: $out"
  elif [ "$got" != "$expected" ]; then
    fail "FA_CMAKE_ARGS=$(printf '%q' "$value"): cmake got [$got], want [$expected]"
  else
    printf 'ok: FA_CMAKE_ARGS=%q -> %d words\n' "$value" "${#want[@]}"
  fi
done

# Nothing is expanded: a command substitution stays text and does not run.
# ($(>FILE) would create FILE if it ran.)
run_course '-DX=$(>'"$scratch"'/ran) -DY=`>'"$scratch"'/ran` -DZ=$HOME'
got=$(recorded)
if [ $rc -ne 0 ] || [ -e "$scratch/ran" ] || [ "$got" != "$(printf '%q\n' "-DX=\$(>$scratch/ran)" "-DY=\`>$scratch/ran\`" '-DZ=$HOME')" ]; then
  fail "expansions: exit $rc, ran: $([ -e "$scratch/ran" ] && echo yes || echo no), cmake got [$got]"
else
  echo "ok: \$(...), backquotes and \$HOME pass as text"
fi

# Refused with exit 2 and one line, before cmake runs: a line break, an unclosed quote, a
# backslash at the end.
for value in $'-DA=1\n-DB=2' $'-DA=1\r' '-DA="x' "-DA='x" '-DA=x\'; do
  run_course "$value"
  lines=$(printf '%s\n' "$out" | wc -l)
  if [ $rc -ne 2 ] || [ -f "$RECORD" ] || [ "$lines" -ne 1 ] || [[ $out != *FA_CMAKE_ARGS* ]]; then
    fail "FA_CMAKE_ARGS=$(printf '%q' "$value"): exit $rc (want 2), cmake ran: $([ -f "$RECORD" ] && echo yes || echo no), $lines lines: $out"
  else
    printf 'ok: FA_CMAKE_ARGS=%q refused: %s\n' "$value" "$out"
  fi
done

# A failed configure ends with a next: line that says what to try.
check_next() {  # check_next WHAT OUTPUT-OF-CMAKE PATTERN
  rc=0
  out=$(cd "$scratch/tree" && FAKE_CMAKE_RC=1 FAKE_CMAKE_OUTPUT=$2 ./course tour 2>&1) || rc=$?
  last=$(printf '%s\n' "$out" | tail -n 1)
  if [ $rc -ne 1 ] || [[ $last != next:* ]] || [[ $last != *$3* ]]; then
    fail "$1: exit $rc (want 1), last line: $last"
  else
    printf 'ok: %s: %s\n' "$1" "$last"
  fi
}
check_next "a failed CUDA configure" $'-- The CUDA compiler identification is NVIDIA 13.0\nCMake Error at /usr/share/cmake-3.25/Modules/FindCUDAToolkit.cmake:1088 (set_property):' \
  'FA_CMAKE_ARGS=-DFA_ENABLE_CUDA=OFF ./course tour'
check_next "a missing package" $'-- The CUDA compiler identification is NVIDIA 13.0\nCMake Error at CMakeLists.txt:41 (message):\n  Eigen 3.4 not found: install the Debian package libeigen3-dev' \
  './course setup'
check_next "another error" $'CMake Error at CMakeLists.txt:1 (project):\n  something else' 'rm -rf build'

# ./course check with a line break, an escape sequence or a lone C1 byte in the exercise's name:
# refused before anything is built, on one line with the name escaped, exit 2.
for id in $'ex01\n' $'ex\e]0;title\a' $'ex\x9b1m'; do
  rc=0
  out=$(cd "$scratch/tree" && ./course check "$id" 2>&1) || rc=$?
  shown=$(printf '%q' "$id")
  if [ $rc -ne 2 ] || [ "$(printf '%s\n' "$out" | wc -l)" -ne 1 ] || [[ $out == *[[:cntrl:]]* ]] ||
     [[ $out == *$'\x9b'* ]]; then
    fail "./course check $shown: exit $rc (want 2), output: $(printf '%q' "$out")"
  else
    printf 'ok: ./course check %s: %s\n' "$shown" "$out"
  fi
done

if [ $failures -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "every case holds"
