#!/usr/bin/env python3
"""Mutation testing of `tp-run verify`: break correct plans systematically and check every break is noticed.

Base plans: the presets' plans at tp 2 on the tiny models, in canonical form (every layout explicit), written by
`tp-plan search --out-plan` on a config whose search space holds just that plan (tiny-llama: vanilla,
sequence_parallel with loss parallel, sequence_parallel + float8 tensorwise; tiny-gpt: vanilla, sequence_parallel
without loss parallel). Each base plan must itself pass `mpirun -np 2 tp-run verify`.

Mutants, one change each, at every site:
  drop        remove a module entry (its redistributions and sharding disappear; the module runs replicated)
  layout      each input_layouts / output_layouts / desired_input_layouts of each entry, replaced in turn by each
              of R, P, S(0), S(1), S(-1)
  local       flip use_local_output of each entry
  style       colwise <-> rowwise on each linear/embedding entry (layouts kept)
  loss        flip the plan's loss_parallel
(The plan format has no per-module float8 style: float8 is plan-wide, and the lowering adds the amax all-reduce
wherever a cast tensor is sharded, so no plan can drop it. The verifier's test tests/runtime/mpi/verifier_test.cc
removes it from the Program and checks that verify fails.)

Each mutant is then
  refused     `tp-plan explain` (the same lowering as tp-run) exits 2 with one line `tp-plan: error: ...`;
  killed      `mpirun -np 2 tp-run verify` exits 1;
  run-refused lowering accepted the plan but tp-run stopped it while executing, exit 2 with one line
              `tp-run: error ...` (Open MPI's MPI_ABORT notice aside): caught, but later than it should be;
  equivalent  verify passes and the mutant's Program is op for op the base plan's (compared on the op records of
              `tp-run profile`: names, kinds, IR fields, local shapes, dtypes, placements) — the change has no effect;
  passes (different Program)  verify passes at seeds 1, 2 and 3 with a Program that differs: a different plan that
              computes the same step (an equivalent mutant in the sense of mutation testing, listed so that each one
              can be explained), or a verify false negative;
  BAD         anything else: a crash, a multi-line error, a hang (over 60 s).
Kill rate = (refused + run-refused + killed) / (mutants - equivalent - passes). The exit status is 1 when a mutant is BAD or the
kill rate is below 100 % with a survivor: here a survivor is a mutant whose Program differs and whose verify
passes at one seed but not at another (flaky detection).

  tests/mutation/verify_mutants.py --build build [--max-mutants N] [--seconds S] [--out DIR]
--max-mutants takes every k-th mutant (deterministic) for a short CI run.
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_ALLOW_RUN_AS_ROOT="1",
           OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
LAYOUTS = ["R", "P", "S(0)", "S(1)", "S(-1)"]
LAYOUT_KEYS = ["input_layouts", "output_layouts", "desired_input_layouts"]

# name, model preset, search-space overrides of the one-plan config
BASES = [
    ("llama-vanilla", "tiny-llama", "presets: [vanilla], float8: [none], loss_parallel: [false]"),
    ("llama-sp", "tiny-llama", "presets: [sequence_parallel], float8: [none], loss_parallel: [true]"),
    ("llama-sp-float8", "tiny-llama", "presets: [sequence_parallel], float8: [tensorwise], loss_parallel: [true]"),
    ("gpt-vanilla", "tiny-gpt", "presets: [vanilla], float8: [none], loss_parallel: [false]"),
    ("gpt-sp", "tiny-gpt", "presets: [sequence_parallel], float8: [none], loss_parallel: [false]"),
]


def config_text(model, search):
    # The tiny models of examples/ at tp 2 on two GPUs (dp 1), fp32 so that verify's tolerance is tight.
    return (f"model: {{preset: {model}}}\n"
            "training: {seq_len: 32, local_batch_size: 2, dtype: fp32, activation_checkpointing: none}\n"
            "cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 2}\n"
            f"search: {{tp_degrees: [2], {search}, async_tp: [false], activation_checkpointing: [none], "
            "local_batch_sizes: [2]}\n")


def run(cmd, timeout):
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=ENV)
        return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"), \
            time.monotonic() - start
    except subprocess.TimeoutExpired:
        return None, "", "", time.monotonic() - start


def split_top(s):
    """Splits 'a: 1, b: [x, y]' at top-level commas."""
    parts, depth, cur = [], 0, ""
    for c in s:
        if c in "[{(":
            depth += 1
        elif c in "]})":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += c
    if cur.strip():
        parts.append(cur.strip())
    return parts


class PlanText:
    """A canonical plan YAML: header lines and module entries as ordered dicts."""

    def __init__(self, text):
        self.header, self.modules = [], []
        in_modules = False
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            if line.startswith("modules:"):
                in_modules = True
                continue
            if in_modules:
                m = re.match(r"^  (\S+): \{(.*)\}$", line)
                assert m, f"unexpected plan line: {line}"
                entry = collections.OrderedDict()
                for kv in split_top(m.group(2)):
                    k, _, v = kv.partition(":")
                    entry[k.strip()] = v.strip()
                self.modules.append((m.group(1), entry))
            else:
                self.header.append(line)

    def text(self):
        out = list(self.header) + ["modules:"]
        for pattern, entry in self.modules:
            out.append(f"  {pattern}: {{" + ", ".join(f"{k}: {v}" for k, v in entry.items()) + "}")
        return "\n".join(out) + "\n"

    def copy(self):
        c = PlanText("")
        c.header = list(self.header)
        c.modules = [(p, collections.OrderedDict(e)) for p, e in self.modules]
        return c


def mutants(base):
    """(id, description, PlanText) for every single-site mutation of `base`."""
    out = []
    for i, (pattern, entry) in enumerate(base.modules):
        m = base.copy()
        del m.modules[i]
        out.append((f"drop:{pattern}", f"drop the entry {pattern} ({entry['style']})", m))
        for key in LAYOUT_KEYS:
            if key not in entry:
                continue
            current = entry[key]
            first = current[1:-1].split(",")[0].strip() if current.startswith("[") else current
            for alt in LAYOUTS:
                if alt == first:
                    continue
                m = base.copy()
                value = "[" + ", ".join([alt] + [x.strip() for x in current[1:-1].split(",")[1:]]) + "]" \
                    if current.startswith("[") else alt
                m.modules[i][1][key] = value
                out.append((f"layout:{pattern}:{key}={alt}", f"{pattern} {key} {current} -> {value}", m))
        if "use_local_output" in entry:
            m = base.copy()
            flipped = "false" if entry["use_local_output"] == "true" else "true"
            m.modules[i][1]["use_local_output"] = flipped
            out.append((f"local:{pattern}={flipped}", f"{pattern} use_local_output -> {flipped}", m))
        if entry["style"] in ("colwise", "rowwise"):
            m = base.copy()
            other = "rowwise" if entry["style"] == "colwise" else "colwise"
            m.modules[i][1]["style"] = other
            out.append((f"style:{pattern}={other}", f"{pattern} style {entry['style']} -> {other}", m))
    for j, line in enumerate(base.header):
        if line.startswith("loss_parallel:"):
            m = base.copy()
            flipped = "false" if line.endswith("true") else "true"
            m.header[j] = f"loss_parallel: {flipped}"
            out.append((f"loss:{flipped}", f"loss_parallel -> {flipped}", m))
    return out


def without_mpi_abort_banner(stderr):
    """stderr without Open MPI's MPI_ABORT notice (printed by mpirun between two rules of dashes, before or after
    the tool's own line)."""
    lines, out, i = stderr.split("\n"), [], 0
    while i < len(lines):
        if re.fullmatch(r"-{20,}", lines[i]):
            j = i + 1
            while j < len(lines) and not re.fullmatch(r"-{20,}", lines[j]):
                j += 1
            if j < len(lines) and any("MPI_ABORT was invoked" in l for l in lines[i:j]):
                i = j + 1
                continue
        out.append(lines[i])
        i += 1
    return "\n".join(l for l in out if l.strip())


def one_line_error(stderr, tool):
    lines = without_mpi_abort_banner(stderr).strip("\n").split("\n")
    # mpirun's own notes ("[host:pid] 1 more process has sent help message ...") are not the tool's.
    lines = [l for l in lines if not re.match(r"^\[[^\]]+:\d+\] ", l)]
    # Ranks that fail alike each say so: one line per rank, the same message but for "(rank k of n)".
    if tool == "tp-run" and len(lines) > 1:
        if len({re.sub(r"\(rank \d+ of \d+\)", "(rank)", l) for l in lines}) == 1:
            lines = lines[:1]
    return len(lines) == 1 and lines[0].startswith(f"{tool}: error") and len(lines[0]) < 1000


def program_ops(build, cfg, plan, work):
    """The op records of the expanded Program (tp-run profile), without timings: the Program, op for op."""
    out = os.path.join(work, "profile.json")
    rc, _, err, _ = run(mpirun(2) + [os.path.join(build, "tools", "tp-run"), "profile", cfg, "--plan", plan,
                                     "--warmup", "0", "--iters", "1", "--out", out], 120)
    if rc != 0:
        return None
    with open(out) as f:
        ops = json.load(f)["ops"]
    for op in ops:
        for k in ("time_us", "samples_us"):
            op.pop(k, None)
    return ops


def mpirun(np):
    return ["mpirun", "--oversubscribe", "--allow-run-as-root", "-np", str(np)]


def verify(build, cfg, plan, seed=1):
    return run(mpirun(2) + [os.path.join(build, "tools", "tp-run"), "verify", cfg, "--plan", plan,
                            "--seed", str(seed)], 60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--max-mutants", type=int, default=0, help="every k-th mutant, about this many (0: all)")
    ap.add_argument("--seconds", type=float, default=0, help="stop starting mutants after this long (0: no limit)")
    ap.add_argument("--out", default="", help="write every mutant and its outcome here (a folder)")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    tp_plan = os.path.join(build, "tools", "tp-plan")
    work = tempfile.mkdtemp(prefix="verify-mutants-")
    start = time.monotonic()
    outcomes = collections.Counter()
    lines = []
    bad = []
    survivors = []
    try:
        all_mutants = []
        for name, model, search in BASES:
            cfg = os.path.join(work, f"{name}.yaml")
            with open(cfg, "w") as f:
                f.write(config_text(model, search))
            plan_file = os.path.join(work, f"{name}.plan.yaml")
            rc, _, err, _ = run([tp_plan, "search", cfg, "--threads", "1", "--out-plan", plan_file], 60)
            if rc != 0:
                print(f"verify_mutants: cannot write the base plan {name}: {err.strip()}", file=sys.stderr)
                return 2
            rc, out, err, _ = verify(build, cfg, plan_file)
            if rc != 0:
                print(f"verify_mutants: the base plan {name} does not verify:\n{out}{err}", file=sys.stderr)
                return 2
            with open(plan_file) as f:
                base = PlanText(f.read())
            for mid, desc, m in mutants(base):
                all_mutants.append((name, cfg, plan_file, mid, desc, m))
        chosen = all_mutants
        if args.max_mutants and len(all_mutants) > args.max_mutants:
            step = len(all_mutants) / args.max_mutants
            chosen = [all_mutants[int(i * step)] for i in range(args.max_mutants)]
        base_programs = {}
        n_done = 0
        for name, cfg, base_plan, mid, desc, m in chosen:
            if args.seconds and time.monotonic() - start > args.seconds:
                break
            n_done += 1
            plan = os.path.join(work, "mutant.yaml")
            with open(plan, "w") as f:
                f.write(m.text())
            rc, _, err, _ = run([tp_plan, "explain", cfg, "--plan", plan], 30)
            if rc == 2 and one_line_error(err, "tp-plan"):
                outcome, detail = "refused", err.strip().split("error: ", 1)[-1]
            elif rc not in (0, 2):
                outcome, detail = "BAD", f"tp-plan explain exit {rc}: {err.strip()[:300]}"
            elif rc == 2:
                outcome, detail = "BAD", f"tp-plan explain: error not on one line: {err.strip()[:300]}"
            else:
                rc, out, err, _ = verify(build, cfg, plan)
                if rc == 1:
                    last = [l for l in out.splitlines() if l.startswith("verify: FAIL")]
                    outcome, detail = "killed", (last[0] if last else "exit 1")[:200]
                elif rc == 2 and one_line_error(err, "tp-run"):
                    # Lowering accepted the plan but tp-run refused it while executing (a shape check of an op).
                    outcome, detail = "run-refused", without_mpi_abort_banner(err).strip()[:200]
                elif rc == 0:
                    if name not in base_programs:
                        base_programs[name] = program_ops(build, cfg, base_plan, work)
                    ops = program_ops(build, cfg, plan, work)
                    if ops is not None and ops == base_programs[name]:
                        outcome, detail = "equivalent", "same Program op for op"
                    else:
                        seeds = [verify(build, cfg, plan, s)[0] for s in (2, 3)]
                        if all(r == 0 for r in seeds):
                            outcome, detail = "passes", "verify passes at seeds 1, 2, 3; the Program differs"
                        else:
                            outcome, detail = "SURVIVOR", f"verify passes at seed 1, exits {seeds} at seeds 2, 3"
                            survivors.append(f"{name} {desc}")
                else:
                    outcome, detail = "BAD", f"tp-run verify exit {rc}: {(out + err).strip()[-300:]}"
            if outcome == "BAD":
                bad.append(f"{name} {desc}: {detail}")
            outcomes[outcome] += 1
            lines.append(f"{outcome:10s} {name:16s} {desc}: {detail}")
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                safe = re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{name}-{mid}")
                with open(os.path.join(args.out, safe + ".yaml"), "w") as f:
                    f.write(f"# {outcome}: {desc}\n# " + detail.replace("\n", "\n# ") + "\n" + m.text())
    finally:
        shutil.rmtree(work, ignore_errors=True)

    for l in lines:
        print(l)
    killed = outcomes["refused"] + outcomes["run-refused"] + outcomes["killed"]
    judged = killed + outcomes["SURVIVOR"]
    rate = 100.0 * killed / judged if judged else 100.0
    print(f"verify_mutants: {n_done} of {len(all_mutants)} mutants in {time.monotonic() - start:.0f} s: "
          + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    print(f"verify_mutants: kill rate {killed}/{judged} = {rate:.1f} % of the mutants that change the Program and "
          f"fail at some seed; {outcomes['equivalent']} equivalent (same Program), {outcomes['passes']} pass with a "
          "different Program (listed as 'passes': each is a different correct plan or a verify false negative)")
    if survivors:
        print("verify_mutants: SURVIVORS:\n  " + "\n  ".join(survivors))
    if bad:
        print("verify_mutants: BAD (crash, hang or multi-line error):\n  " + "\n  ".join(bad))
    return 1 if bad or survivors else 0


if __name__ == "__main__":
    sys.exit(main())
