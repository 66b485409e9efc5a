#!/usr/bin/env bash
# Checks that every C++ source git tracks (third_party/ excepted) is formatted as .clang-format
# says; prints the offending files and exits 1 otherwise. Fix with:
#   clang-format -i $(git ls-files 'core/*.cc' 'core/*.h' 'bindings/*.cc' 'bindings/*.h' 'tests/cpp/*.cc' 'tests/cpp/*.h' 'tests/fuzz/*.cc' 'tests/gpu_emulation/*.cc' 'tests/gpu_emulation/*.h' 'bench/scale/*.cc' 'bench/scale/*.h')
# CI installs Debian 12's clang-format (14); other major versions may format some lines differently.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check_format.sh: $CLANG_FORMAT not found; install it (apt-get install clang-format)" >&2
  exit 2
fi
"$CLANG_FORMAT" --version

mapfile -t files < <(git ls-files 'core/*.cc' 'core/*.h' 'bindings/*.cc' 'bindings/*.h' \
                                  'tests/cpp/*.cc' 'tests/cpp/*.h' 'tests/fuzz/*.cc' \
                                  'tests/gpu_emulation/*.cc' 'tests/gpu_emulation/*.h' \
                                  'bench/scale/*.cc' 'bench/scale/*.h')
bad=()
for f in "${files[@]}"; do
  if ! "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ "${#bad[@]}" -gt 0 ]; then
  echo "not formatted as .clang-format says (${#bad[@]} of ${#files[@]} files):"
  printf '  %s\n' "${bad[@]}"
  "$CLANG_FORMAT" --dry-run "${bad[0]}" 2>&1 | head -20
  exit 1
fi
echo "${#files[@]} C++ files formatted as .clang-format says"
