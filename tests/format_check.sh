#!/usr/bin/env bash
# format_check.sh [SOURCE_DIR]: lists the C++ and CUDA sources (*.cc *.h *.cu *.cuh) whose formatting differs from
# the repository's .clang-format, and fails (exit 1) when there is any. Registered in ctest as
# "format: clang-format"; .ci/install-deps installs clang-format.
#
#   exit 0    every source is formatted
#   exit 1    the files that differ, one a line, then the command that fixes them
#   exit 77   clang-format is not installed: skipped, with one line saying so (ctest reports the test as skipped)
#
# The sources are the files git knows (tracked, and untracked ones that .gitignore does not ignore), so build
# directories and the files generated into them are never checked; outside a git checkout, every source under
# SOURCE_DIR except build*/ directories. CLANG_FORMAT names another binary. Formatting differs a little between
# clang-format versions: the repository is formatted with the CI image's (Debian 12: clang-format 14).
set -euo pipefail
root="$(cd "${1:-$(dirname "$0")/..}" && pwd)"
clang_format="${CLANG_FORMAT:-clang-format}"
if ! command -v "$clang_format" > /dev/null 2>&1; then
  echo "format-check: $clang_format not found: skipped (apt-get install clang-format, or .ci/install-deps)"
  exit 77
fi
cd "$root"
[ -f .clang-format ] || { echo "format-check: $root/.clang-format missing" >&2; exit 2; }
files=()
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  while IFS= read -r -d '' f; do
    [ -f "$f" ] && files+=("$f")  # a file deleted but not yet staged is still listed by git
  done < <(git ls-files -z --cached --others --exclude-standard -- '*.cc' '*.h' '*.cu' '*.cuh')
else
  while IFS= read -r -d '' f; do files+=("${f#./}"); done < <(
    find . -path './build*' -prune -o -path './.git' -prune -o -type f \
      \( -name '*.cc' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
fi
[ ${#files[@]} -gt 0 ] || { echo "format-check: no sources found under $root" >&2; exit 2; }

# One clang-format for all files (one process per file takes seconds): it names each file that differs in lines
# "FILE:LINE:COL: error: code should be clang-formatted [-Wclang-format-violations]".
rc=0
report="$(printf '%s\0' "${files[@]}" | xargs -0 "$clang_format" --dry-run -Werror --style=file 2>&1)" || rc=$?
differ=()
while IFS= read -r f; do [ -n "$f" ] && differ+=("$f"); done < <(
  sed -n 's/^\(.*\):[0-9]*:[0-9]*: error: code should be clang-formatted.*/\1/p' <<< "$report" | sort -u)
if [ $rc -ne 0 ] && [ ${#differ[@]} -eq 0 ]; then  # it failed without naming a file that differs
  echo "format-check: $clang_format failed (exit $rc):" >&2
  head -20 <<< "$report" >&2
  exit 2
fi
if [ ${#differ[@]} -eq 0 ]; then
  echo "format-check: ${#files[@]} files formatted as .clang-format says ($("$clang_format" --version | head -1))"
  exit 0
fi
version="$("$clang_format" --version | head -1)"
echo "format-check: ${#differ[@]} of ${#files[@]} files differ from .clang-format ($version):"
printf '  %s\n' "${differ[@]}"
echo "format-check: fix them with: (cd $root && $clang_format -i ${differ[*]})"
exit 1
