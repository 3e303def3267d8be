#!/usr/bin/env bash
# readme_tour.sh SOURCE_DIR TOOLS_DIR...: runs the README's tour as written (issue 21: "the tour of the README
# executed as a test in CI").
#
# The tour is the first ```sh block after the heading "## A tour" of README.md; every line of it that is not empty
# is one command, run in order by bash with the build's tp-plan and tp-run first on PATH, in a scratch folder where
# `examples` is the repository's. The test fails at the first command that exits non-zero (and when the block is not
# found or is empty). A command's output is shown only when it fails.
set -uo pipefail
src="$(cd "$1" && pwd)"; shift
tools_path=""
for d in "$@"; do tools_path="$tools_path$(cd "$d" && pwd):"; done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# The block: from the first "```sh" after "## A tour" to the next "```".
awk '/^## A tour$/ { tour = 1; next }
     tour && /^## / { exit }
     tour && !inblock && /^```sh$/ { inblock = 1; next }
     inblock && /^```$/ { exit }
     inblock && NF { print }' "$src/README.md" >"$tmp/tour.txt"
n=$(wc -l <"$tmp/tour.txt")
if [ "$n" -eq 0 ]; then echo "FAIL: no \`\`\`sh block under '## A tour' in $src/README.md"; exit 1; fi

ln -s "$src/examples" "$tmp/examples"
cd "$tmp" || exit 1
export PATH="$tools_path$PATH"
# mpirun's ranks on this machine inherit this environment: ctest's (TPTUNE_MPI_ENV: oversubscription, root allowed,
# one thread, and the sanitizer options under -DTPTUNE_SANITIZE).
i=0
while IFS= read -r cmd; do
  i=$((i + 1))
  start=$(date +%s)
  if bash -c "$cmd" >"$tmp/out.txt" 2>&1 </dev/null; then
    echo "ok $i/$n ($(( $(date +%s) - start )) s): $cmd"
  else
    rc=$?
    echo "FAIL $i/$n: exit $rc: $cmd"
    tail -n 40 "$tmp/out.txt"
    exit 1
  fi
done <"$tmp/tour.txt"
echo "the tour ran: $n commands"
