#!/usr/bin/env python3
"""CLI-level mutation fuzzing of the whole tp-plan pipeline (Python 3 standard library only).

Mutates the bundled example configs (examples/*.yaml) and plan YAMLs (tests/fuzz/corpus/plan/*.yaml: the
integration tests' hand-written plans and canonical `search --out-plan` winners) with key deletions, value swaps,
huge / negative / zero numbers, wrong types, unicode, deep nesting, long values, duplicated lines and truncation,
then runs `tp-plan explain | simulate | search | export` on each mutant, a third of them also writing outputs (--json,
--report, --out-plan) to new files, to the config or plan itself, or to a link to one (issue 37). A run FAILS when it

  - exits with a status other than 0, 1 or 2, or is killed by a signal;
  - exits with 2 without exactly one line on stderr starting "tp-plan: error: ", or with a line over 1000 bytes;
  - changes its config or plan file (an output over an input must be refused, exit 2);
  - runs over 5 s of CPU time (or 30 s of wall time: a hang) or needs more than 1 GB of address space (RLIMIT_AS: an allocation beyond it fails, and
    the tool must then still fail cleanly; a bad_alloc reported as an internal error counts as a failure).

  tests/fuzz/cli_mutate.py --tp-plan build/tools/tp-plan --runs 200 --seed 1 --out build/cli-fuzz

Each failure is written to OUT/<n>/ (the mutant files, cmd.sh that replays it, stdout, stderr, why); failures
are grouped by their first line of stderr with digits blanked. Exit status: 0 when every run passed, 1 otherwise.
The same --seed gives the same mutants.
"""

import argparse
import collections
import os
import random
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(os.path.join(ROOT, "examples", f) for f in os.listdir(os.path.join(ROOT, "examples"))
                 if f.endswith(".yaml"))
PLAN_DIR = os.path.join(ROOT, "tests", "fuzz", "corpus", "plan")
PLANS = sorted(os.path.join(PLAN_DIR, f) for f in os.listdir(PLAN_DIR) if f.endswith(".yaml"))

TIME_LIMIT_S = 5.0  # CPU seconds (user + system): wall time on a shared CI machine says little
WALL_LIMIT_S = 30.0  # a run that waits (a hang) is stopped here
MEMORY_LIMIT = 1 << 30
MAX_ERROR_LINE = 1000

NUMBERS = ["0", "-1", "-8", "1", "3", "7", "2147483647", "2147483648", "4294967296", "4294967297",
           "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616",
           "1e9", "1e12", "1e18", "1e300", "-1e300", "1e-300", "0.5", "1.5", "-0.0", ".inf", "-.inf", ".nan",
           "0x10", "0o17", "1_000", "+5", "007", "1e", "12abc"]
WRONG_TYPES = ["[1, 2]", "[]", "{}", "{a: 1}", "~", "null", "true", "no", "''", "\"\"", "abc", "[[[]]]",
               "!!binary aGVsbG8=", "&anchor 1", "*anchor", "{dim: 64}", "- x", "|\n  multi\n  line",
               ">\n  folded\n  text", "'multi\n  line'"]
UNICODE = ["é", "\u202e", "\u200b", "𝔘𝔫𝔦", "\ufeff", "日本語", "\x7f", "\\u0000", "\x01", "ä" * 50]
STYLES = ["colwise", "rowwise", "sequence_parallel", "prepare_module_input", "no_parallel", "Colwise", "rowwise "]
LAYOUTS = ["R", "P", "S(0)", "S(1)", "S(-1)", "S(2)", "S(-3)", "S(99999999999)", "S(-2147483649)", "S()", "S(1",
           "Shard(1)", "Replicate()", "Partial()", "[S(1), None]", "[None]", "[R, R]", "S(1.5)", "S(x)"]
KEY_RE = re.compile(r"^(\s*)([^\s#:][^:]*?):(\s*)(.*)$")


class Rng(random.Random):
    def pick(self, xs):
        return xs[self.randrange(len(xs))]


def deep(rng):
    depth = rng.pick([64, 512, 4096, 20000])
    if rng.random() < 0.5:
        return "[" * depth + "1" + "]" * depth
    return "{a: " * depth + "1" + "}" * depth


def value_of(line):
    m = KEY_RE.match(line)
    return m if m and m.group(4) and not m.group(4).startswith("#") else None


# --- mutation operators: each takes the file's lines and returns new lines (or None when not applicable) ---

def op_delete_line(rng, lines):
    cands = [i for i, l in enumerate(lines) if l.strip() and not l.lstrip().startswith("#")]
    if not cands:
        return None
    i = rng.pick(cands)
    return lines[:i] + lines[i + 1:]


def op_delete_block(rng, lines):  # a key and everything indented below it
    cands = [i for i, l in enumerate(lines) if KEY_RE.match(l) and not l.lstrip().startswith("#")]
    if not cands:
        return None
    i = rng.pick(cands)
    indent = len(lines[i]) - len(lines[i].lstrip())
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent):
        j += 1
    return lines[:i] + lines[j:]


def set_value(rng, lines, make):
    cands = [i for i, l in enumerate(lines) if value_of(l)]
    if not cands:
        return None
    i = rng.pick(cands)
    m = value_of(lines[i])
    value = m.group(4)
    # Inside a flow map ({style: colwise, input_layouts: R}) mutate one entry of it.
    if value.startswith("{") and "," in value and rng.random() < 0.7:
        parts = value.strip("{}").split(",")
        k = rng.randrange(len(parts))
        key, _, _ = parts[k].partition(":")
        parts[k] = f"{key}: {make(rng)}"
        value = "{" + ",".join(parts) + "}"
    else:
        value = make(rng)
    out = list(lines)
    out[i] = f"{m.group(1)}{m.group(2)}: {value}"
    return out


def op_number(rng, lines):
    return set_value(rng, lines, lambda r: r.pick(NUMBERS))


def op_wrong_type(rng, lines):
    return set_value(rng, lines, lambda r: r.pick(WRONG_TYPES))


def op_layout_or_style(rng, lines):
    return set_value(rng, lines, lambda r: r.pick(LAYOUTS + STYLES))


def op_long_value(rng, lines):
    return set_value(rng, lines, lambda r: r.pick(["x", "9", "é", "S(1)"]) * r.pick([1000, 100000]))


def op_deep(rng, lines):
    return set_value(rng, lines, deep)


def op_swap_values(rng, lines):
    cands = [i for i, l in enumerate(lines) if value_of(l)]
    if len(cands) < 2:
        return None
    i, j = rng.sample(cands, 2)
    a, b = value_of(lines[i]), value_of(lines[j])
    out = list(lines)
    out[i] = f"{a.group(1)}{a.group(2)}: {b.group(4)}"
    out[j] = f"{b.group(1)}{b.group(2)}: {a.group(4)}"
    return out


def op_unicode(rng, lines):
    if not lines:
        return None
    i = rng.randrange(len(lines))
    pos = rng.randrange(len(lines[i]) + 1)
    out = list(lines)
    out[i] = lines[i][:pos] + rng.pick(UNICODE) + lines[i][pos:]
    return out


def op_rename_key(rng, lines):
    cands = [i for i, l in enumerate(lines) if KEY_RE.match(l) and not l.lstrip().startswith("#")]
    if not cands:
        return None
    i = rng.pick(cands)
    m = KEY_RE.match(lines[i])
    key = m.group(2)
    new = rng.pick([key + key[-1], key[:-1], key.upper(), "*", "layers.*.*", "wqq", "", "? " + key, key + ".x"])
    out = list(lines)
    out[i] = f"{m.group(1)}{new}:{m.group(3)}{m.group(4)}"
    return out


def op_duplicate_line(rng, lines):
    if not lines:
        return None
    i = rng.randrange(len(lines))
    return lines[:i + 1] + [lines[i]] + lines[i + 1:]


def op_indent(rng, lines):
    if not lines:
        return None
    i = rng.randrange(len(lines))
    out = list(lines)
    out[i] = rng.pick(["", "  ", "\t", "     "]) + lines[i].lstrip() if rng.random() < 0.7 else "  " + lines[i]
    return out


OPERATORS = [op_delete_line, op_delete_block, op_number, op_number, op_wrong_type, op_layout_or_style, op_long_value,
             op_deep, op_swap_values, op_unicode, op_rename_key, op_duplicate_line, op_indent]


def mutate(rng, text):
    lines = text.split("\n")
    for _ in range(rng.pick([1, 1, 1, 2, 3])):
        new = rng.pick(OPERATORS)(rng, lines)
        if new is not None:
            lines = new
    out = "\n".join(lines)
    if rng.random() < 0.08:  # truncation at a random byte
        data = out.encode("utf-8", "surrogateescape")
        return data[:rng.randrange(len(data) + 1)]
    if rng.random() < 0.03:  # a random byte
        data = bytearray(out.encode("utf-8", "surrogateescape"))
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    return out.encode("utf-8", "surrogateescape")


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def cpu_seconds():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd):
    """Runs one command; returns (status, stdout, stderr, CPU seconds, timed out). Runs are sequential, so the
    growth of RUSAGE_CHILDREN is this command's CPU time."""
    cpu0 = cpu_seconds()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=limits)
    try:
        out, err = p.communicate(timeout=WALL_LIMIT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        timed_out = True
    cpu = cpu_seconds() - cpu0
    return p.returncode, out, err, cpu, timed_out or cpu > TIME_LIMIT_S


def judge(rc, err, timed_out, elapsed):
    """Why this run fails, or None."""
    if timed_out:
        return f"ran over {TIME_LIMIT_S:.0f} s of CPU or {WALL_LIMIT_S:.0f} s of wall time"
    if rc < 0:
        return f"killed by signal {-rc}"
    if rc not in (0, 1, 2):
        return f"exit status {rc}"
    if rc == 2:
        text = err.decode("utf-8", "replace")
        lines = text.rstrip("\n").split("\n")
        if len(lines) != 1:
            return f"exit 2 with {len(lines)} lines on stderr"
        if not lines[0].startswith("tp-plan: error: "):
            return "exit 2 without 'tp-plan: error: '"
        if len(lines[0]) > MAX_ERROR_LINE:
            return f"error line of {len(lines[0])} bytes"
    return None


def signature(why, stderr):
    """Failures of one kind share a signature: the reason and the error's key, quoted values and digits blanked."""
    first = stderr.split("\n")[0]
    first = re.sub(r"^tp-plan: error: [^:]*:\d+: ", "", first)
    first = re.sub(r"'[^']*('|$)", "'...'", first)
    return re.sub(r"\d+", "N", why) + " | " + re.sub(r"\d+", "N", first)[:120]


# Examples whose search space is meant for branch-and-bound (their header says `--bound`): the exhaustive search of
# llama3-405b-ac-layers.yaml (11.7 million candidates) alone takes about the time limit, mutated or not.
BOUND_CONFIGS = {"llama3-405b-ac-layers.yaml"}


def commands(rng, tp_plan, cfg, plan, cfg_src=""):
    """The commands of one run: tp-plan subcommands on the (possibly mutated) config and plan."""
    toggles = rng.pick([[], ["--tp", rng.pick(["1", "2", "4", "8", "16", "3"])], ["--float8", "tensorwise"],
                        ["--async-tp"], ["--ac", "full"], ["--local-batch-size", rng.pick(["1", "4", "1000000"])],
                        ["--dp-shard", rng.pick(["1", "2", "-1", "0"])],
                        ["--dp-replicate", rng.pick(["1", "2", "3", "-1", "0", "1048577"])],
                        ["--global-batch-size", rng.pick(["8", "6", "0", "-1", "68719476737"])], ["--no-loss-parallel"]])
    plan_args = ["--plan", plan] if plan else ["--preset", rng.pick(["vanilla", "sequence_parallel"])]
    sub = rng.pick(["explain", "explain-json", "simulate", "simulate-json", "search", "export"] if plan else
                   ["explain", "explain-json", "simulate", "simulate-json", "search"])
    if sub == "explain":
        return [tp_plan, "explain", cfg] + plan_args + toggles
    if sub == "explain-json":
        return [tp_plan, "explain", cfg] + plan_args + toggles + ["--json", "-"]
    if sub == "simulate":
        return [tp_plan, "simulate", cfg] + plan_args + toggles
    if sub == "simulate-json":
        return [tp_plan, "simulate", cfg] + plan_args + toggles + ["--json", "-"]
    if sub == "search":
        bound = ["--bound"] if os.path.basename(cfg_src) in BOUND_CONFIGS else []
        return [tp_plan, "search", cfg, "--threads", "1", "--top", "3"] + bound
    # --format torchtitan needs the config (the recipe by the model's dimensions, torchrun's world).
    return [tp_plan, "export", plan, "--format", rng.pick(["torchtitan", "python", "torchtitan-toml"])] + rng.pick(
        [["--config", cfg], ["--config", cfg], []])


# The output options each subcommand takes (not --trace: a valid 10,000-layer mutant's trace takes ~10 s to render).
OUTPUTS = {"simulate": ["--json", "--report"], "explain": ["--json"], "search": ["--out-plan", "--json", "--report"]}


def with_outputs(rng, cmd, cfg, plan, tmp):
    """cmd, a third of the time with output options added: new files, the inputs themselves, or links to them."""
    options = [o for o in OUTPUTS.get(cmd[1], []) if o not in cmd]
    if not options or rng.random() >= 1 / 3:
        return cmd
    out = os.path.join(tmp, "out")
    os.makedirs(out, exist_ok=True)
    link = os.path.join(out, "link.yaml")
    if not os.path.lexists(link):
        os.symlink(cfg, link)
    targets = [cfg, link, os.path.join(out, "..", os.path.basename(cfg))] + ([plan] if plan else [])
    extra = []
    for o in rng.sample(options, rng.randint(1, len(options))):
        extra += [o, rng.pick(targets) if rng.random() < 0.5 else os.path.join(out, o.strip("-") + ".out")]
    return cmd + extra


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tp-plan", required=True)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=0, help="stop after this long (0: no limit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default="cli-fuzz-failures")
    args = ap.parse_args()
    tp_plan = os.path.abspath(args.tp_plan)
    rng = Rng(args.seed)
    shutil.rmtree(args.out, ignore_errors=True)
    failures = collections.OrderedDict()
    counts = collections.Counter()
    start = time.monotonic()
    runs = 0
    with tempfile.TemporaryDirectory(prefix="cli-mutate-") as tmp:
        for n in range(args.runs):
            if args.seconds and time.monotonic() - start > args.seconds:
                break
            runs += 1
            cfg_src = rng.pick(CONFIGS)
            plan_src = rng.pick(PLANS) if rng.random() < 0.5 else None
            target = "plan" if plan_src and rng.random() < 0.6 else "config"
            cfg, plan = os.path.join(tmp, "config.yaml"), os.path.join(tmp, "plan.yaml") if plan_src else None
            with open(cfg_src, "rb") as f:
                data = f.read()
            with open(cfg, "wb") as f:
                f.write(mutate(rng, data.decode()) if target == "config" else data)
            if plan_src:
                with open(plan_src, "rb") as f:
                    data = f.read()
                with open(plan, "wb") as f:
                    f.write(mutate(rng, data.decode()) if target == "plan" else data)
            cmd = commands(rng, tp_plan, cfg, plan, cfg_src)
            # Outputs from a stream of their own, so that a seed's mutants and commands stay those it always gave.
            # The files this command reads (a search does not read the plan: writing its report over plan.yaml
            # destroys no input of its own).
            read = [p for p in (cfg, plan) if p and p in cmd]
            cmd = with_outputs(Rng(f"{args.seed}-{n}"), cmd, cfg, plan, tmp)
            inputs = {p: open(p, "rb").read() for p in read}
            rc, out, err, elapsed, timed_out = run(cmd)
            counts[f"exit {rc}" if not timed_out else "timeout"] += 1
            why = judge(rc, err, timed_out, elapsed)
            changed = [os.path.basename(p) for p, data in inputs.items()
                       if not os.path.isfile(p) or open(p, "rb").read() != data]
            if changed and not why:
                why = f"the run changed its input {', '.join(changed)}"
            shutil.rmtree(os.path.join(tmp, "out"), ignore_errors=True)
            if not why:
                continue
            sig = signature(why, err.decode("utf-8", "replace"))
            case = os.path.join(args.out, str(n))
            os.makedirs(case)
            for p in (cfg, plan):
                if p:
                    shutil.copy(p, case)
            replay = [c.replace(tmp, ".") for c in cmd]
            with open(os.path.join(case, "cmd.sh"), "w") as f:
                f.write(f"cd \"$(dirname \"$0\")\" && {shlex.join(replay)}\n")
            for name, data in (("stdout", out), ("stderr", err)):
                with open(os.path.join(case, name), "wb") as f:
                    f.write(data[:200000])
            with open(os.path.join(case, "why"), "w") as f:
                f.write(f"{why} ({elapsed:.2f} s of CPU, from {os.path.relpath(cfg_src, ROOT)}"
                        f"{' + ' + os.path.relpath(plan_src, ROOT) if plan_src else ''}, mutated {target})\n")
            failures.setdefault(sig, []).append(case)
    elapsed = time.monotonic() - start
    print(f"cli_mutate: {runs} runs in {elapsed:.0f} s (seed {args.seed}): " +
          ", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))
    if not failures:
        print("cli_mutate: no failures")
        return 0
    total = sum(len(v) for v in failures.values())
    print(f"cli_mutate: {total} FAILED runs, {len(failures)} distinct (replay: OUT/<n>/cmd.sh):")
    for sig, cases in failures.items():
        print(f"  {len(cases):4d}x  {sig}   e.g. {cases[0]}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
