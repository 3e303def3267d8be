#!/usr/bin/env python3
"""bench/gpu_goals.py WORK_DIR: issue 39's goals, read from what bench/gpu-check.sh wrote in WORK_DIR.

Prints a Markdown section (gpu-check puts it in summary.md, one of the two files a lease brings back):

  goal                                          threshold            read from
  [cuda] tests                                  0 failed             cuda-tests.txt (Catch2's compact summaries)
  every memory-bound kernel vs a copy           >= 70 % of the copy  memory-bound-8b.json (ops moving >= 64 MiB)
  float8 amax + casts, 405B tp 8 float8 step    <= 5 % of the step   profile-405b-tp8-tensorwise[-compile].json
  compiled faster than eager where the          measured compiled <  profile-405b-tp8-F[-compile].json and
  simulator says so                             eager when predicted accuracy.json (tp-plan accuracy of them)

Each goal reads met, NOT MET or not measured (a file missing, a run without a device). The float8 share is the
time of the profile's cast_fp8 records (every amax and cast timed alone) over the compute-only step's median wall;
in a compiled profile an amax folded into its producer is inside the producer's record, so only what stays a
separate kernel counts. Standard library only: it runs wherever gpu-check runs.
"""

import json
import os
import re
import sys

MEMORY_BOUND_PERCENT = 70.0
MEMORY_BOUND_MIN_BYTES = 64 << 20
FLOAT8_SHARE_PERCENT = 5.0


def load(work, name):
    path = os.path.join(work, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def cuda_tests(work):
    """(verdict, detail) from the compact reporter's last line per test binary."""
    path = os.path.join(work, "cuda-tests.txt")
    if not os.path.exists(path):
        return "not measured", "no cuda-tests.txt"
    text = open(path, errors="replace").read()
    if "no CUDA device visible" in text:
        return "not measured", "no CUDA device visible: the [cuda] tests skipped"
    if "no [cuda] test binary" in text:
        return "not measured", "no [cuda] test binary: a build without the CUDA toolkit"
    failed = passed = 0
    summaries = re.findall(r"^(Passed all (\d+) test cases|Failed (\d+) test cases?)", text, re.M)
    for line, ok, bad in summaries:
        if ok:
            passed += int(ok)
        else:
            failed += int(bad)
    if not summaries:
        return "not measured", "no Catch2 summary line in cuda-tests.txt"
    binaries = len(re.findall(r"^## ", text, re.M))
    detail = f"{failed} failed" + (f", {passed} passed" if passed else "") + f" ({binaries} binaries)"
    return ("met" if failed == 0 else "NOT MET"), detail


def memory_bound(work):
    r = load(work, "memory-bound-8b.json")
    if r is None:
        return "not measured", "no memory-bound-8b.json", []
    judged = [x for x in r["results"] if x["bytes"] >= MEMORY_BOUND_MIN_BYTES]
    below = [x for x in judged if x["percent_of_copy"] < MEMORY_BOUND_PERCENT]
    if not judged:
        return "not measured", f"no op moves >= 64 MiB at this shape (copy {r['copy']['GBps']:.0f} GB/s)", []
    worst = min(judged, key=lambda x: x["percent_of_copy"])
    detail = (f"{len(judged) - len(below)} of {len(judged)} ops >= {MEMORY_BOUND_PERCENT:.0f} %; lowest "
              f"{worst['op']} {worst['percent_of_copy']:.0f} % (copy {r['copy']['GBps']:.0f} GB/s)")
    rows = [f"| {x['op']} | {x['bytes'] / (1 << 20):.0f} | {x['GBps']:.0f} | {x['copy_GBps']:.0f} | "
            f"{x['percent_of_copy']:.0f} |" for x in r["results"]]
    return ("met" if not below else "NOT MET"), detail, rows


def float8_share(work, suffix):
    p = load(work, f"profile-405b-tp8-tensorwise{suffix}.json")
    if p is None:
        return None
    wall = p.get("compute_wall_us") or p.get("step_wall_us")  # local shapes on one GPU: the compute-only wall
    if not wall:
        return None
    step_us = wall["median"]
    cast_us = sum(op["time_us"]["median"] for op in p["ops"] if op.get("kind") == "cast_fp8" and "time_us" in op)
    return cast_us / 1000.0, step_us / 1000.0


def float8_goal(work):
    parts, met = [], {}
    for suffix, mode in (("", "eager"), ("-compile", "compiled")):
        share = float8_share(work, suffix)
        if share is None:
            continue
        cast_ms, step_ms = share
        percent = 100.0 * cast_ms / step_ms
        met[mode] = percent <= FLOAT8_SHARE_PERCENT
        parts.append(f"{mode} {cast_ms:.1f} of {step_ms:.1f} ms = {percent:.1f} %")
    if not parts:
        return "not measured", "no 405B float8 profile"
    if all(met.values()):
        verdict = "met"
    elif any(met.values()):
        verdict = "met " + " and ".join(m for m, ok in met.items() if ok) + " only"
    else:
        verdict = "NOT MET"
    return verdict, "; ".join(parts)


def compile_goal(work):
    acc = load(work, "accuracy.json")
    if acc is None:
        return "not measured", "no accuracy.json (tp-plan not carried?)"
    by_file = {os.path.basename(s["profile"]): s for s in acc["steps"]}
    parts, verdicts = [], []
    for f8 in ("none", "tensorwise"):
        eager, compiled = by_file.get(f"profile-405b-tp8-{f8}.json"), by_file.get(f"profile-405b-tp8-{f8}-compile.json")
        if eager is None or compiled is None:
            continue
        predicted = compiled["predicted_ms"] - eager["predicted_ms"]
        measured = compiled["measured_ms"] - eager["measured_ms"]
        # The goal: compiled faster where the simulator says so (it predicts compiled at least 0.5 % faster).
        if predicted < -0.005 * eager["predicted_ms"]:
            verdicts.append(measured < 0)
        parts.append(f"float8 {f8}: predicted {predicted:+.1f} ms, measured {measured:+.1f} ms "
                     f"(eager {eager['measured_ms']:.1f}, compiled {compiled['measured_ms']:.1f})")
    if not parts:
        return "not measured", "no eager/compiled 405B profile pair in accuracy.json"
    if not verdicts:
        return "met", "the simulator predicts no gain; " + "; ".join(parts)
    return ("met" if all(verdicts) else "NOT MET"), "; ".join(parts)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: bench/gpu_goals.py WORK_DIR (the folder bench/gpu-check.sh wrote)", file=sys.stderr)
        return 2
    work = sys.argv[1]
    tests = cuda_tests(work)
    mb_verdict, mb_detail, mb_rows = memory_bound(work)
    goals = [
        ("[cuda] tests: 0 failed", *tests),
        (f"every memory-bound kernel >= {MEMORY_BOUND_PERCENT:.0f} % of a copy", mb_verdict, mb_detail),
        (f"float8 amax + casts <= {FLOAT8_SHARE_PERCENT:.0f} % of the 405B tp 8 float8 step", *float8_goal(work)),
        ("compiled faster than eager where the simulator says so", *compile_goal(work)),
    ]
    print("## Issue 39's goals")
    print()
    print("| goal | verdict | measured |")
    print("| --- | --- | --- |")
    for goal, verdict, detail in goals:
        print(f"| {goal} | {verdict} | {detail} |")
    if mb_rows:
        print()
        print("| memory-bound op | MiB | GB/s | copy GB/s | % of copy |")
        print("| --- | ---: | ---: | ---: | ---: |")
        print("\n".join(mb_rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
