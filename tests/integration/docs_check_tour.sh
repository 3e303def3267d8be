#!/usr/bin/env bash
# docs_check_tour.sh SOURCE_DIR TOOLS_DIR...: docs/check.md shows what `tp-plan check` prints, not a typed copy.
#   1. its "## A tour" runs, and every quoted output matches what the commands printed (readme_tour.sh -- FILE);
#   2. the rendered copy of the markdown report (the lines between the markers "<!-- check-markdown-rendered:
#      begin -->" and "... end -->", each quoted with "> ") is the output quoted after the tour's first command with
#      --format markdown, line for line (without the quote's final "exit status N" line: not part of the report);
#   3. the GitHub Actions workflow (the ```yaml block) is YAML, each of its `run:` scripts is bash (bash -n), and the
#      options its `tp-plan check` command uses are options of `tp-plan check --help` (skipped without PyYAML).
set -euo pipefail
src="$1"; shift
tp_plan="$1/tp-plan"
doc="$src/docs/check.md"
"$(dirname "$0")/readme_tour.sh" "$src" "$@" -- "$doc"
python3 - "$doc" "$tp_plan" <<'PYTHON'
import re, subprocess, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")
tour = lines.index("## A tour")
command = next(i for i in range(tour, len(lines)) if "--format markdown" in lines[i])
start = lines.index("```text", command) + 1
quote = lines[start:lines.index("```", start)]
while quote and quote[-1].startswith("exit status "):
    quote.pop()
begin = lines.index("<!-- check-markdown-rendered: begin -->") + 1
rendered = lines[begin:lines.index("<!-- check-markdown-rendered: end -->")]
unquoted = [l[2:] if l.startswith("> ") else l[1:] if l == ">" else None for l in rendered]
if None in unquoted:
    sys.exit(f"FAIL: docs/check.md:{begin + unquoted.index(None) + 1}: a rendered line that is not quoted with '> '")
if unquoted != quote:
    for i, (a, b) in enumerate(zip(unquoted + [None] * len(quote), quote + [None] * len(unquoted))):
        if a != b:
            sys.exit(f"FAIL: docs/check.md:{begin + i + 1}: the rendered copy has {a!r}, the quoted output {b!r}")
print(f"ok: the rendered report in docs/check.md is the quoted output ({len(quote)} lines)")

try:
    import yaml
except ImportError:
    print("docs_check_tour: PyYAML not found: the workflow is not checked")
    sys.exit(0)
start = lines.index("```yaml") + 1
workflow = yaml.safe_load("\n".join(lines[start:lines.index("```", start)]))
steps = workflow["jobs"]["tp-plan-check"]["steps"]
scripts = [s["run"] for s in steps if "run" in s]
for script in scripts:
    r = subprocess.run(["bash", "-n"], input=script.encode(), capture_output=True)
    if r.returncode != 0:
        sys.exit(f"FAIL: docs/check.md: a run step of the workflow is not bash: {r.stderr.decode()}")
help_text = subprocess.run([sys.argv[2], "check", "--help"], capture_output=True, text=True).stdout
known = set(re.findall(r"(--[a-z][a-z0-9-]*)", help_text))
check = next(s for s in scripts if " check " in s)
used = set(re.findall(r" (--[a-z][a-z0-9-]*)", check.split(" check ", 1)[1]))
if not used or not used <= known:
    sys.exit(f"FAIL: docs/check.md: the workflow's tp-plan check uses {sorted(used - known)}, not options of check")
if not any(s.get("uses", "").startswith("marocchino/sticky-pull-request-comment@") for s in steps):
    sys.exit("FAIL: docs/check.md: the workflow posts no pull-request comment")
print(f"ok: the workflow is YAML, {len(scripts)} run steps are bash, check's options {sorted(used)} exist")
PYTHON
