#!/usr/bin/env bash
# golden_diff_test.sh GOLDEN_DIFF: golden_diff's rules on copies of the committed golden files (ctest
# "golden: golden_diff rules"): a number moved by 1e-8 relative fails and is named with old -> new; 1e-11 passes;
# a removed or added JSON field is reported but passes; a changed string fails; a golden file without a case in
# cases.txt fails (removed case); a case without a golden file fails; the version stamp ("tptune": which build wrote
# the file) is ignored, whether it differs or exists on one side only.
set -uo pipefail
diff_tool="$1"
here="$(cd "$(dirname "$0")" && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
case_name=llama3-8b-sp-tp8
printf '%s: x\n' "$case_name" > "$tmp/cases.txt"
mkdir -p "$tmp/expected" "$tmp/actual"
cp "$here/expected/$case_name.json" "$tmp/expected/"

# run NAME RC REGEX EDIT [ABSENT]: applies EDIT (a sed -E expression) to a fresh actual copy, then runs golden_diff:
# it must exit RC, print something matching REGEX and, when given, nothing matching ABSENT.
run() {
  local name="$1" want="$2" regex="$3" edit="$4" absent="${5:-}"
  cp "$here/expected/$case_name.json" "$tmp/actual/"
  sed -i -E "$edit" "$tmp/actual/$case_name.json"
  local out rc
  out=$("$diff_tool" "$tmp/expected" "$tmp/actual" "$tmp/cases.txt" 2>&1); rc=$?
  if [ "$rc" -ne "$want" ] || ! printf '%s\n' "$out" | grep -Eq -- "$regex" ||
    { [ -n "$absent" ] && printf '%s\n' "$out" | grep -Eq -- "$absent"; }; then
    echo "FAIL: $name: exit $rc (expected $want), output should match /$regex/${absent:+ and not /$absent/}:"
    printf '%s\n' "$out"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}
step=$(sed -n -E 's/^  "step_time_ms": ([0-9.e+-]+),?$/\1/p' "$here/expected/$case_name.json")
big=$(awk -v s="$step" 'BEGIN { printf "%.17g", s * (1 + 1e-8) }')
small=$(awk -v s="$step" 'BEGIN { printf "%.17g", s * (1 + 1e-11) }')
run "unchanged passes" 0 "1 unchanged" 's/x/x/'
run "1e-8 relative fails" 1 "step_time_ms .* -> .*\(\+1\.000e-08" "s/^  \"step_time_ms\": .*/  \"step_time_ms\": $big,/"
run "1e-11 relative passes" 0 "golden: PASS" "s/^  \"step_time_ms\": .*/  \"step_time_ms\": $small,/"
run "removed field is reported, passes" 0 "field removed: mfu" '/^  "mfu": /d'
run "added field is reported, passes" 0 "field added: zz_new" 's/^\{$/{"zz_new": 1,/'
run "changed string fails" 1 "peak_phase" 's/"peak_phase": "[a-z]+"/"peak_phase": "nowhere"/'
run "a version stamp only in the new file is ignored" 0 "golden: PASS" \
  's/^\{$/{"tptune": {"version": "9.9.9", "git_hash": "0000000"},/' tptune
sed -i -E 's/^\{$/{"tptune": {"version": "0.0.1", "git_hash": "1111111"},/' "$tmp/expected/$case_name.json"
run "a version stamp of another build is ignored" 0 "golden: PASS" \
  's/^\{$/{"tptune": {"version": "9.9.9", "git_hash": "0000000"},/' tptune
run "a version stamp only in the golden file is ignored" 0 "golden: PASS" 's/x/x/' tptune
cp "$here/expected/$case_name.json" "$tmp/expected/"
cp "$here/expected/$case_name.json" "$tmp/expected/stray-case.json"
run "removed case fails" 1 "stray-case: golden file of a case no longer in" 's/x/x/'
rm "$tmp/expected/stray-case.json"
printf 'new-case: x\n' >> "$tmp/cases.txt"
cp "$here/expected/$case_name.json" "$tmp/actual/new-case.json"
run "new case without golden file fails" 1 "new-case: new case without a golden file" 's/x/x/'
exit $((failures > 0))
