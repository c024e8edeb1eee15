#!/usr/bin/env bash
# Configures the course, with the CUDA toolkit found, under several CMakes: the oldest the course
# supports and the newest, so that a CMake module's bug cannot stop a learner's first configure
# unnoticed. Each must configure and report the GPU stages' architectures (CUDA really enabled).
#   debian-3.25.1  Debian 12's CMake with the distribution's pristine FindCUDAToolkit.cmake (the
#                  system's if `dpkg --verify cmake-data` finds it unmodified, else the package's
#                  copy from `apt-get download`), when the system CMake is 3.25;
#   pypi-3.25.2    the oldest CMake on PyPI that the course accepts (3.25.0 is refused by
#                  cmake_minimum_required; 3.25.1 is not on PyPI), in a virtual environment;
#   pypi-latest    the newest CMake on PyPI.
# Without nvcc it skips (exit 77); a variant that cannot be had (no network, not Debian) is
# skipped with one line; what was fetched is kept in CACHE for the next run.
# Usage: configure_with_cmakes.sh SOURCE CACHE     Exit code: 0 when every variant that ran
# configured, 1 otherwise, 77 when none could run.
set -euo pipefail
source_dir=$(cd "${1:?usage: configure_with_cmakes.sh SOURCE CACHE}" && pwd)
cache=${2:?usage: configure_with_cmakes.sh SOURCE CACHE}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

nvcc=${CUDACXX:-$(command -v nvcc || true)}
[ -n "$nvcc" ] || [ ! -x /usr/local/cuda/bin/nvcc ] || nvcc=/usr/local/cuda/bin/nvcc
if [ -z "$nvcc" ]; then
  echo "skipped: no CUDA compiler (nvcc) on this machine"
  exit 77
fi
echo "nvcc: $nvcc ($("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'))"

ran=0 failed=0
configure() {  # configure NAME CMAKE [cmake options...]: configure a fresh build folder
  local name=$1 cmake=$2 dir=$cache/build-$1
  shift 2
  rm -rf "$dir"
  local t0=$SECONDS rc=0
  "$cmake" -S "$source_dir" -B "$dir" -G Ninja -DCMAKE_CUDA_COMPILER="$nvcc" "$@" >"$cache/$name.log" 2>&1 || rc=$?
  ran=$((ran + 1))
  local line
  line=$(grep -m1 -o 'CUDA [0-9.]*: GPU stages build for architectures.*' "$cache/$name.log" || true)
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    failed=$((failed + 1))
    echo "FAIL: $name ($("$cmake" --version | head -n 1)): exit $rc; the log's errors:"
    sed -n '/CMake Error/,/^$/p' "$cache/$name.log" | head -n 15
    [ -n "$line" ] || echo "  (and no 'GPU stages build for' line: CUDA was not enabled)"
  else
    echo "ok: $name ($("$cmake" --version | head -n 1), $((SECONDS - t0)) s): $line"
  fi
  rm -rf "$dir"
}

# ---- Debian 12's CMake with its own, unmodified module --------------------------------------------
if command -v cmake >/dev/null && [[ $(cmake --version | head -n 1) == "cmake version 3.25."* ]] && command -v dpkg >/dev/null; then
  version=$(dpkg-query -W -f '${Version}' cmake-data 2>/dev/null || true)
  modules=""
  if [ -n "$version" ] && ! dpkg --verify cmake-data 2>/dev/null | grep -q 'FindCUDAToolkit.cmake$'; then
    modules=default
  elif [ -d "$cache/cmake-data-$version" ]; then
    modules=$cache/cmake-data-$version
  elif [ -n "$version" ] && command -v apt-get >/dev/null; then
    mkdir -p "$cache/download"
    if (cd "$cache/download" && timeout 120 apt-get download "cmake-data=$version" >/dev/null 2>&1); then
      mkdir -p "$cache/unpacked" "$cache/cmake-data-$version"
      dpkg-deb -x "$cache"/download/cmake-data_*.deb "$cache/unpacked"
      for m in FindCUDAToolkit FindPackageHandleStandardArgs FindPackageMessage; do
        cp "$cache"/unpacked/usr/share/cmake-*/Modules/$m.cmake "$cache/cmake-data-$version/"
      done
      rm -rf "$cache/unpacked" "$cache/download"
      modules=$cache/cmake-data-$version
    fi
  fi
  if [ "$modules" = default ]; then
    configure debian-3.25 cmake
  elif [ -n "$modules" ]; then
    configure debian-3.25 cmake -DCMAKE_MODULE_PATH="$modules"
  else
    echo "skipped: debian-3.25: this system's FindCUDAToolkit.cmake was modified and apt-get download cmake-data=$version failed"
  fi
else
  echo "skipped: debian-3.25: the system's CMake is not Debian's 3.25"
fi

# ---- CMake from PyPI -------------------------------------------------------------------------------
pypi_cmake() {  # pypi_cmake NAME REQUIREMENT: configure with that CMake, from a cached venv
  local name=$1 requirement=$2 venv=$cache/venv-$1
  if [ ! -x "$venv/bin/cmake" ]; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      echo "skipped: $name: python3 -m venv failed (Debian package python3-venv)"
      return 0
    fi
    if ! timeout 300 "$venv/bin/pip" install --quiet --disable-pip-version-check "$requirement" >"$cache/$name-pip.log" 2>&1; then
      rm -rf "$venv"
      echo "skipped: $name: pip install $requirement failed (no network?): $(tail -n 1 "$cache/$name-pip.log")"
      return 0
    fi
  fi
  configure "$name" "$venv/bin/cmake"
}
pypi_cmake pypi-3.25.2 'cmake==3.25.2'
pypi_cmake pypi-latest 'cmake'

if [ $ran -eq 0 ]; then
  echo "skipped: no CMake variant could be had here"
  exit 77
fi
echo "$((ran - failed)) of $ran configured"
[ $failed -eq 0 ]
