#!/usr/bin/env python3
"""tests/integration/gpu_goals_test.py SOURCE_DIR: bench/gpu_goals.py on made-up runs, one verdict at a time.

The CPU rehearsal (gpu_check_rehearsal.sh) reaches the goals' "not measured" paths and whatever its CPU times give;
this drives every verdict the next GPU run can produce (met, NOT MET, met in one mode only) from files written here,
with the numbers worked out by hand beside each case.
"""

import json
import os
import subprocess
import sys
import tempfile

src = sys.argv[1]
goals_py = os.path.join(src, "bench", "gpu_goals.py")
failures = []


def run(files):
    with tempfile.TemporaryDirectory() as work:
        for name, content in files.items():
            with open(os.path.join(work, name), "w") as f:
                f.write(content if isinstance(content, str) else json.dumps(content))
        out = subprocess.run([sys.executable, goals_py, work], capture_output=True, text=True, check=True).stdout
    return {line.split(" | ")[0].lstrip("| "): line.split(" | ")[1:] for line in out.splitlines() if line.startswith("| ")}


def expect(rows, goal, verdict, *details):
    row = next((v for k, v in rows.items() if k.startswith(goal)), None)
    if row is None:
        failures.append(f"no row for '{goal}'")
        return
    if row[0] != verdict:
        failures.append(f"'{goal}': verdict '{row[0]}', expected '{verdict}' ({row[1]})")
    for d in details:
        if d not in row[1]:
            failures.append(f"'{goal}': '{d}' not in '{row[1]}'")


MiB = 1 << 20


def memory_bound(*ops):
    return {"copy": {"GBps": 3350.0}, "results": [
        {"op": op, "bytes": mib * MiB, "GBps": pct * 33.5, "copy_GBps": 3350.0, "percent_of_copy": pct}
        for op, mib, pct in ops]}


def profile(step_ms, *casts_ms):
    ops = [{"kind": "cast_fp8", "time_us": {"median": ms * 1000}} for ms in casts_ms]
    ops.append({"kind": "gemm", "time_us": {"median": step_ms * 500}})
    return {"compute_wall_us": {"median": step_ms * 1000}, "ops": ops}


def accuracy(none_eager, none_compiled, f8_eager, f8_compiled):
    """(predicted_ms, measured_ms) per profile."""
    steps = []
    for name, (p, m) in (("none", none_eager), ("none-compile", none_compiled), ("tensorwise", f8_eager),
                         ("tensorwise-compile", f8_compiled)):
        steps.append({"profile": f"/x/profile-405b-tp8-{name}.json", "predicted_ms": p, "measured_ms": m})
    return {"steps": steps}


# 1. Two binaries, one failing: 2 failed, and the 42 of the passing one (a failing binary's line counts no passes).
rows = run({"cuda-tests.txt": "## a\nPassed all 42 test cases with 9 assertions.\n## b\nFailed 2 test cases, "
                              "failed 4 assertions.\n"})
expect(rows, "[cuda] tests", "NOT MET", "2 failed, 42 passed (2 binaries)")
rows = run({"cuda-tests.txt": "## a\nPassed all 42 test cases with 9 assertions.\n## b\nPassed all 15 test cases "
                              "with 3 assertions.\n"})
expect(rows, "[cuda] tests", "met", "0 failed, 57 passed (2 binaries)")
expect(rows, "every memory-bound kernel", "not measured", "no memory-bound-8b.json")
rows = run({"cuda-tests.txt": "no [cuda] test binary in build (configure with the CUDA toolkit)\n"})
expect(rows, "[cuda] tests", "not measured", "a build without the CUDA toolkit")

# 2. Memory-bound: rope at 69 % fails the 70 % bound; an op of 63 MiB at 10 % is not judged (under 64 MiB).
rows = run({"memory-bound-8b.json": memory_bound(("rmsnorm_fwd", 128, 75.0), ("rope_fwd", 128, 69.0),
                                                 ("tiny", 63, 10.0))})
expect(rows, "every memory-bound kernel", "NOT MET", "1 of 2 ops >= 70 %; lowest rope_fwd 69 %")
rows = run({"memory-bound-8b.json": memory_bound(("rmsnorm_fwd", 128, 75.0), ("rope_fwd", 64, 70.0))})
expect(rows, "every memory-bound kernel", "met", "2 of 2 ops >= 70 %; lowest rope_fwd 70 %")

# 3. float8 share: eager 8 of 150 ms = 5.3 % (not met), compiled 7 of 145 = 4.8 % (met): met compiled only.
rows = run({"profile-405b-tp8-tensorwise.json": profile(150.0, 5.0, 3.0),
            "profile-405b-tp8-tensorwise-compile.json": profile(145.0, 4.0, 3.0)})
expect(rows, "float8 amax + casts", "met compiled only", "eager 8.0 of 150.0 ms = 5.3 %",
       "compiled 7.0 of 145.0 ms = 4.8 %")
rows = run({"profile-405b-tp8-tensorwise.json": profile(150.0, 7.5)})
expect(rows, "float8 amax + casts", "met", "eager 7.5 of 150.0 ms = 5.0 %")

# 4. Compile: predicted 190 -> 180 (a gain), measured 187 -> 188 (slower): not met; with the float8 pair predicted
# 160 -> 159.5 (-0.3 %, under the 0.5 % that counts as a predicted gain) it is not judged.
rows = run({"accuracy.json": accuracy((190, 187), (180, 188), (160, 150), (159.5, 151))})
expect(rows, "compiled faster", "NOT MET", "float8 none: predicted -10.0 ms, measured +1.0 ms",
       "float8 tensorwise: predicted -0.5 ms, measured +1.0 ms")
rows = run({"accuracy.json": accuracy((190, 187), (180, 180), (160, 150), (159.5, 151))})
expect(rows, "compiled faster", "met", "measured -7.0 ms")
rows = run({"accuracy.json": accuracy((190, 187), (190, 188), (160, 150), (160, 151))})
expect(rows, "compiled faster", "met", "the simulator predicts no gain")

if failures:
    print("gpu_goals_test: " + "\n  ".join(failures), file=sys.stderr)
    sys.exit(1)
print("gpu_goals_test: 11 runs, every verdict as worked out")
