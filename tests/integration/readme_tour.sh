#!/usr/bin/env bash
# readme_tour.sh SOURCE_DIR TOOLS_DIR... [-- FILE.md]: runs the tour of README.md and checks every output it quotes.
#
# The tour is the section "## A tour" of README.md (up to the next "## " heading). In it:
#   ```sh      a block of commands: every line that is neither empty nor a comment is one command, run by bash in
#              order. A command that exits non-zero fails the test (write `cmd || echo "exit status $?"` to show a
#              refusal on purpose: the echo is then part of the output).
#   ```text    right after a ```sh block: the output of that block's commands (stdout and stderr together, in the
#              order written). A line `...` stands for any number of lines (none included). The quoted lines are
#              compared in order with what the commands printed, exactly after trailing spaces are removed: the
#              first quoted line is the output's first line unless the quote starts with `...`, the last is its
#              last line unless the quote ends with `...`. Under mpirun, the ranks' stdout and stderr reach the
#              pipe in no fixed order: quote only lines whose place does not depend on it.
# Any other fenced block in the tour (```yaml, ```json, ...) is left alone. Commands run with the build's tp-plan and
# tp-run first on PATH, in a scratch folder where `examples` and `tests` are the repository's, so a later block can use
# what an earlier one wrote (best.yaml). The test fails, naming the command and the first quoted line that differs
# (with what was printed there), at the first mismatch, and when the tour has no command.
#
# `-- FILE.md` checks FILE.md's tour instead of README.md's (used to show the test failing on a changed number).
set -uo pipefail
src="$(cd "$1" && pwd)"; shift
tools_path=""
readme="$src/README.md"
while [ $# -gt 0 ]; do
  if [ "$1" = "--" ]; then readme="$2"; break; fi
  tools_path="$tools_path$(cd "$1" && pwd):"; shift
done
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
ln -s "$src/examples" "$tmp/examples"
ln -s "$src/tests" "$tmp/tests"
export PATH="$tools_path$PATH"
# mpirun's ranks on this machine inherit this environment: ctest's (TPTUNE_MPI_ENV: oversubscription, root allowed,
# one thread, and the sanitizer options under -DTPTUNE_SANITIZE).
cd "$tmp" || exit 1
exec python3 - "$readme" <<'PYTHON'
import os, subprocess, sys, time

readme = sys.argv[1]
name = os.path.basename(readme)
lines = open(readme, encoding="utf-8").read().split("\n")

# The tour's fenced blocks, in order: (language, [lines], line number of the fence in the file).
blocks, in_tour, fence = [], False, None
for no, line in enumerate(lines, 1):
    if line == "## A tour":
        in_tour = True
        continue
    if in_tour and fence is None and line.startswith("## "):
        break
    if not in_tour:
        continue
    if fence is None and line.startswith("```"):
        fence = (line[3:].strip(), [], no)
    elif fence is not None and line == "```":
        blocks.append(fence)
        fence = None
    elif fence is not None:
        fence[1].append(line)
if fence is not None:
    sys.exit(f"FAIL: {readme}:{fence[2]}: the fenced block is not closed")


def match(quote, out):
    """None when `quote` (with `...` lines) matches `out`, else (quoted line index, expected, printed line)."""
    chunks, cur = [], []
    for q in quote:
        if q.strip() == "...":
            chunks.append(cur)
            cur = []
        else:
            cur.append(q.rstrip())
    chunks.append(cur)
    anchored_start, anchored_end = chunks[0] != [] or len(chunks) == 1, chunks[-1] != []
    pos, qi = 0, 0  # next output line to look at; index in `quote` of the chunk's first line
    for ci, chunk in enumerate(chunks):
        if not chunk:
            qi += 1
            continue
        last = ci == len(chunks) - 1
        if ci == 0 and anchored_start:
            starts = [0]
        else:  # the last chunk of a quote anchored at the end must also end where the output ends (checked below)
            starts = range(pos, max(pos, len(out) - len(chunk)) + 1)
        best = None  # (lines matched, start) of the closest attempt, for the message
        for s in starts:
            n = 0
            while n < len(chunk) and s + n < len(out) and out[s + n] == chunk[n]:
                n += 1
            if n == len(chunk) and (not (last and anchored_end) or s + n == len(out)):
                pos = s + n
                break
            if best is None or n > best[0]:
                best = (n, s)
        else:
            n, s = best if best else (0, pos)
            printed = out[s + n] if s + n < len(out) else "(end of output)"
            if n == len(chunk):  # matched, but the output goes on where the quote ends
                return (qi + n - 1, "(end of output after this line)", printed)
            return (qi + n, chunk[n], printed)
        qi += len(chunk) + 1
    return None


commands_run, quotes_checked, prev = 0, 0, None
for lang, body, no in blocks:
    if lang == "sh":
        outputs = []
        for cmd in body:
            if not cmd.strip() or cmd.lstrip().startswith("#"):
                continue
            start = time.time()
            r = subprocess.run(["bash", "-c", cmd], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
            text = r.stdout.decode("utf-8", "replace")
            commands_run += 1
            if r.returncode != 0:
                print(f"FAIL: {name}:{no}: exit {r.returncode}: {cmd}")
                print("\n".join(text.splitlines()[-40:]))
                sys.exit(1)
            print(f"ok ({time.time() - start:.1f} s): {cmd}")
            outputs += [l.rstrip() for l in text.splitlines()]
        prev = (body, no, outputs)
    elif lang == "text":
        if prev is None:
            sys.exit(f"FAIL: {name}:{no}: a quoted output (```text) that follows no ```sh block")
        cmds = " && ".join(c for c in prev[0] if c.strip() and not c.lstrip().startswith("#"))
        bad = match(body, prev[2])
        quotes_checked += 1
        if bad is not None:
            i, expected, printed = bad
            print(f"FAIL: {name}:{no + 1 + i}: the output of `{cmds}` differs from the quote")
            print(f"  quoted:  {expected}")
            print(f"  printed: {printed}")
            print("the whole output:")
            print("\n".join(prev[2]))
            sys.exit(1)
        print(f"ok: the quote at {name}:{no} matches the output of `{cmds}`")
        prev = None
    else:
        prev = None
if commands_run == 0:
    sys.exit(f"FAIL: no command in a ```sh block under '## A tour' in {readme}")
print(f"the tour ran: {commands_run} commands, {quotes_checked} quoted outputs match")
PYTHON
