#!/usr/bin/env bash
# install_test.sh CMAKE BUILD_DIR: `cmake --install BUILD_DIR --prefix P` into a temporary prefix, then the installed
# tools run from an unrelated directory, with nothing of the source or build tree on their paths:
#   - P/bin/tp-plan --version and P/bin/tp-run --version print their version line;
#   - P/bin/tp-plan simulate of the bundled example P/share/tptune/examples/tiny-llama.yaml prints the same report as
#     BUILD_DIR's tp-plan (the GPU presets are compiled in), and an example that names a transformers config.json
#     by a relative path (llama3-8b-hf.yaml) finds it in the installed examples;
#   - P/bin/tp-run verify of the bundled example passes on one process (no mpirun).
set -euo pipefail
cmake="$1"; build="$(cd "$2" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
"$cmake" --install "$build" --prefix "$prefix" > "$tmp/install.log" || { cat "$tmp/install.log"; exit 1; }
fail() { echo "install_test: FAIL: $*" >&2; exit 1; }
for f in bin/tp-plan share/tptune/examples/tiny-llama.yaml share/tptune/examples/llama3-8b-hf.yaml; do
  [ -e "$prefix/$f" ] || fail "$f was not installed (installed: $(cd "$prefix" && find . -type f | head -20 | tr '\n' ' '))"
done
mkdir "$tmp/elsewhere"
cd "$tmp/elsewhere"  # not the source tree: relative paths of the repository do not resolve here

"$prefix/bin/tp-plan" --version | tee "$tmp/version"
grep -Eq '^tp-plan [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]+|unknown)\)$' "$tmp/version" || fail "tp-plan --version"
examples="$prefix/share/tptune/examples"
"$prefix/bin/tp-plan" simulate "$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2 > "$tmp/installed.txt" ||
  fail "the installed tp-plan simulate exited $?"
"$build/tools/tp-plan" simulate "$examples/tiny-llama.yaml" --preset sequence_parallel --tp 2 > "$tmp/built.txt"
diff "$tmp/built.txt" "$tmp/installed.txt" || fail "the installed tp-plan predicts otherwise than the built one"
head -3 "$tmp/installed.txt"
"$prefix/bin/tp-plan" simulate "$examples/llama3-8b-hf.yaml" --preset sequence_parallel --tp 8 > /dev/null ||
  fail "the installed example with a relative hf_config"

if [ -x "$build/tools/tp-run" ]; then
  [ -x "$prefix/bin/tp-run" ] || fail "bin/tp-run was not installed"
  "$prefix/bin/tp-run" --version | tee "$tmp/run-version"
  grep -Eq '^tp-run [0-9]+\.[0-9]+\.[0-9]+ \(git ([0-9a-f]+|unknown)\)$' "$tmp/run-version" || fail "tp-run --version"
  "$prefix/bin/tp-run" verify "$examples/tiny-llama.yaml" --preset sequence_parallel --tp 1 --quiet > "$tmp/verify.txt" ||
    { cat "$tmp/verify.txt"; fail "the installed tp-run verify exited $?"; }
  tail -1 "$tmp/verify.txt"
fi
echo "install_test: the installed tools run from $prefix"
