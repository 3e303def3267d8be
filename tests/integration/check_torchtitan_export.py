#!/usr/bin/env python3
"""Feeds `tp-plan export --format torchtitan` through torchtitan 0.3's own ConfigManager.

For each case (a model config with a one-candidate torchtitan-0.3 search space), it runs
`tp-plan search --out-plan`, exports the winner with `tp-plan export --format torchtitan --config`, writes the Python
config function the export carries (when it has one), and parses the command-line overrides with
torchtitan.config.ConfigManager exactly as `torchtitan.train` does. Any option torchtitan does not know makes tyro
exit, and the case fails; each parsed field is then compared with the plan.

    python3 tests/integration/check_torchtitan_export.py build/tools/tp-plan

Needs torchtitan 0.3 (`pip install torchtitan==0.3.0` and a torch it supports). Exit status: 0 when every case
parses with zero unknown keys and every value matches, 1 otherwise, 2 when torchtitan cannot be imported.
"""
import contextlib
import io
import os
import shlex
import subprocess
import sys
import tempfile

CASES = [
    # name, model preset, nodes x gpus, search space (one candidate), training lines, expected fields
    ("8B SP tp8 selective", "llama3-8b", (1, 8),
     "tp_degrees: [8]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [selective]\n  local_batch_sizes: [1]",
     "", dict(tp=8, sp=True, dp=1, lbs=1, compile=False, async_tp=False, ac="SelectiveAC", chunks=8)),
    ("8B vanilla tp4 dp2 full AC", "llama3-8b", (1, 8),
     "tp_degrees: [4]\n  presets: [vanilla]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [2]",
     "", dict(tp=4, sp=False, dp=2, lbs=2, compile=False, async_tp=False, ac="FullAC", chunks=8)),
    ("70B SP tp8 float8 rowwise async TP", "llama3-70b", (2, 8),
     "tp_degrees: [8]\n  presets: [sequence_parallel]\n  float8: [rowwise]\n  async_tp: [true]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "", dict(tp=8, sp=True, dp=2, lbs=1, compile=True, async_tp=True, ac="FullAC", chunks=8, float8="rowwise")),
    ("405B SP tp8 rowwise_with_gw_hp compiled", "llama3-405b", (32, 8),
     "tp_degrees: [8]\n  presets: [sequence_parallel]\n  float8: [rowwise_with_gw_hp]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "  compile: true\n",
     dict(tp=8, sp=True, dp=32, lbs=1, compile=True, async_tp=False, ac="FullAC", chunks=8,
          float8="rowwise_with_gw_hp")),
    ("405B bf16 (the recipe's converter removed)", "llama3-405b", (32, 8),
     "tp_degrees: [8]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "  compile: false\n",
     dict(tp=8, sp=True, dp=32, lbs=1, compile=False, async_tp=False, ac="FullAC", chunks=8, float8=None)),
    ("405B pp8 x tp8 x dp8 interleaved 1F1B (pipeline parallelism)", "llama3-405b", (64, 8),
     "tp_degrees: [8]\n  pp_degrees: [8]\n  pp_schedules: [Interleaved1F1B]\n  pp_microbatch_sizes: [1]\n"
     "  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [8]",
     "  compile: false\n",
     dict(tp=8, sp=True, dp=8, lbs=8, compile=False, async_tp=False, ac="FullAC", chunks=8, float8=None, pp=8,
          pp_schedule="Interleaved1F1B", pp_mbs=1)),
    ("8B SP tp2 x cp2 x dp2 (context parallelism)", "llama3-8b", (1, 8),
     "tp_degrees: [2]\n  cp_degrees: [2]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "", dict(tp=2, sp=True, dp=2, cp=2, lbs=1, compile=False, async_tp=False, ac="FullAC", chunks=8)),
    # Mixture of experts: Qwen3 30B-A3B's config.json is torchtitan 0.3's qwen3_30b_a3b recipe (--module qwen3).
    ("Qwen3 30B-A3B tp2 x ep4 x dp4 (expert parallelism)", "hf:examples/hf/qwen3-30b-a3b/config.json", (1, 8),
     "tp_degrees: [2]\n  ep_degrees: [4]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "", dict(tp=2, sp=True, dp=4, ep=4, lbs=1, compile=False, async_tp=False, ac="FullAC", chunks=8, seq=4096,
              flavor=("qwen3", "30B-A3B"))),
    ("Qwen3 30B-A3B ep8 x dp8, no TP", "hf:examples/hf/qwen3-30b-a3b/config.json", (1, 8),
     "tp_degrees: [1]\n  ep_degrees: [8]\n  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [1]",
     "", dict(tp=1, sp=False, dp=8, ep=8, lbs=1, compile=False, async_tp=False, ac="FullAC", chunks=8,
              seq=4096, flavor=("qwen3", "30B-A3B"))),
    ("Qwen3 30B-A3B pp2 x ep8 x dp8 1F1B (pipeline and expert parallelism)",
     "hf:examples/hf/qwen3-30b-a3b/config.json", (2, 8),
     "tp_degrees: [1]\n  ep_degrees: [8]\n  pp_degrees: [2]\n  pp_schedules: [1F1B]\n  pp_microbatch_sizes: [1]\n"
     "  presets: [sequence_parallel]\n  float8: [none]\n  async_tp: [false]\n"
     "  activation_checkpointing: [full]\n  local_batch_sizes: [2]",
     "", dict(tp=1, sp=False, dp=8, ep=8, lbs=2, compile=False, async_tp=False, ac="FullAC", chunks=8,
              seq=4096, flavor=("qwen3", "30B-A3B"), pp=2, pp_schedule="1F1B", pp_mbs=1)),
]

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def config_yaml(model, nodes, gpus, space, training_extra, seq_len):
    # "hf:PATH": a Hugging Face config.json under the source tree; otherwise a model preset.
    source = (f"{{hf_config: {os.path.join(SOURCE_DIR, model[3:])}}}" if model.startswith("hf:")
              else f"{{preset: {model}}}")
    return (f"model: {source}\n"
            f"training:\n  seq_len: {seq_len}\n  local_batch_size: 1\n{training_extra}"
            f"cluster: {{gpu: h100-sxm, nodes: {nodes}, gpus_per_node: {gpus}}}\n"
            f"search:\n  framework: torchtitan-0.3\n  {space}\n  memory_headroom_gib: 0\n")


def split_export(text):
    """The export's Python file (between the heredoc markers) and the torchtitan.train arguments."""
    lines = text.splitlines()
    python, in_py, command = [], False, []
    for line in lines:
        if line.startswith("cat > tptune_torchtitan_config.py <<'PY'"):
            in_py = True
            continue
        if in_py:
            if line == "PY":
                in_py = False
            else:
                python.append(line)
            continue
        if line.startswith("#"):
            continue
        command.append(line.rstrip("\\").strip())
    argv = shlex.split(" ".join(command))
    return "\n".join(python), argv[argv.index("torchtitan.train") + 1:]


def check_case(tp_plan, case, workdir):
    name, model, (nodes, gpus), space, training_extra, want = case
    workdir = os.path.join(workdir, name.split()[0] + "_" + str(abs(hash(name))))
    os.makedirs(workdir)
    cfg = os.path.join(workdir, "config.yaml")
    with open(cfg, "w") as f:
        f.write(config_yaml(model, nodes, gpus, space, training_extra, want.get("seq", 8192)))
    plan = os.path.join(workdir, "plan.yaml")
    search = subprocess.run([tp_plan, "search", cfg, "--out-plan", plan], capture_output=True, text=True)
    if not os.path.exists(plan):
        return [f"{name}: tp-plan search wrote no plan:\n{search.stdout}{search.stderr}"]
    export = subprocess.run([tp_plan, "export", plan, "--format", "torchtitan", "--config", cfg],
                            capture_output=True, text=True)
    if export.returncode != 0:
        return [f"{name}: tp-plan export failed: {export.stderr.strip()}"]
    python, argv = split_export(export.stdout)
    if python:
        with open(os.path.join(workdir, "tptune_torchtitan_config.py"), "w") as f:
            f.write(python + "\n")
        sys.modules.pop("tptune_torchtitan_config", None)
        sys.path.insert(0, workdir)
    from torchtitan.config import ConfigManager
    import torchtitan.components.quantization.float8 as tt_float8

    # Float8LinearConverter refuses to be built without an SM 8.9+ GPU (float8 tensor cores). This check parses
    # configs on a CPU, so the converter's hardware question is answered as on the H100s the plans are for; the
    # converter is otherwise built exactly as torchtitan builds it (torchao's Float8LinearConfig.from_recipe_name).
    tt_float8.has_cuda_capability = lambda major, minor: (major, minor) <= (9, 0)

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            cfg_tt = ConfigManager().parse_args(argv)
    except SystemExit:
        return [f"{name}: ConfigManager rejected the export (unknown key or bad value):\n{err.getvalue()}"]
    errors = []

    def expect(what, got, value):
        if got != value:
            errors.append(f"{name}: {what} is {got!r}, the plan says {value!r}")

    p = cfg_tt.parallelism
    expect("parallelism.tensor_parallel_degree", p.tensor_parallel_degree, want["tp"])
    expect("parallelism.enable_sequence_parallel", p.enable_sequence_parallel, want["sp"])
    expect("parallelism.data_parallel_shard_degree", p.data_parallel_shard_degree, want["dp"])
    expect("parallelism.context_parallel_degree", p.context_parallel_degree, want.get("cp", 1))
    expect("parallelism.context_parallel_load_balancer", p.context_parallel_load_balancer, "headtail")
    expect("parallelism.pipeline_parallel_degree", p.pipeline_parallel_degree, want.get("pp", 1))
    expect("parallelism.expert_parallel_degree", p.expert_parallel_degree, want.get("ep", 1))
    if want.get("pp", 1) > 1:
        expect("parallelism.pipeline_parallel_schedule", p.pipeline_parallel_schedule, want["pp_schedule"])
        expect("parallelism.pipeline_parallel_microbatch_size", p.pipeline_parallel_microbatch_size, want["pp_mbs"])
    # The trainer captures CUDA graphs by default and refuses them with PP and with EP's default dispatcher.
    expect("training.disable_cuda_graphs", cfg_tt.training.disable_cuda_graphs,
           want.get("pp", 1) > 1 or want.get("ep", 1) > 1)
    expect("training.local_batch_size", cfg_tt.training.local_batch_size, want["lbs"])
    expect("training.seq_len", cfg_tt.training.seq_len, want.get("seq", 8192))
    if "flavor" in want:  # the recipe's model: (ModelSpec.name, flavor)
        expect("model_spec", (cfg_tt.model_spec.name, cfg_tt.model_spec.flavor), want["flavor"])
    expect("compile.enable", cfg_tt.compile.enable, want["compile"])
    expect("compile.enable_async_tensor_parallel", cfg_tt.compile.enable_async_tensor_parallel, want["async_tp"])
    expect("loss.num_chunks", getattr(cfg_tt.loss, "num_chunks", None), want["chunks"])
    expect("activation_checkpoint", type(cfg_tt.activation_checkpoint).__qualname__, want["ac"] + ".Config")
    if "float8" in want:
        # The converter swaps the model config's Linear configs for Float8Linear configs carrying torchao's
        # Float8LinearConfig of the recipe; lm_head must stay a plain Linear (filter_fqns).
        text = repr(cfg_tt.model_spec)
        head = text[text.find("lm_head="):][:40]
        if want["float8"] is None:
            if "Float8Linear.Config" in text:
                errors.append(f"{name}: the model spec still carries Float8Linear layers")
        else:
            from torchao.float8 import Float8LinearConfig

            recipe = repr(Float8LinearConfig.from_recipe_name(want["float8"]))
            if "Float8Linear.Config" not in text or recipe not in text:
                errors.append(f"{name}: the model spec has no float8 {want['float8']} layers")
            if "Float8" in head:
                errors.append(f"{name}: lm_head was converted to float8 (filter_fqns)")
    print(f"  {name:45s} {len(argv):3d} arguments, python config: {'yes' if python else 'no '}  "
          f"{'OK' if not errors else 'MISMATCH'}")
    return errors


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tp_plan = os.path.abspath(sys.argv[1])
    try:
        import torchtitan  # noqa: F401
        from importlib.metadata import version
        tt_version = version("torchtitan")
    except Exception as e:  # pragma: no cover - environment dependent
        print(f"check_torchtitan_export: torchtitan is not importable ({e}); pip install torchtitan==0.3.0",
              file=sys.stderr)
        return 2
    print(f"torchtitan {tt_version}, torch {version('torch')}: feeding tp-plan exports through ConfigManager")
    failures = []
    with tempfile.TemporaryDirectory() as d:
        for case in CASES:
            failures += check_case(tp_plan, case, d)
    for f in failures:
        print(f, file=sys.stderr)
    print(f"{len(CASES) - len({f.split(':')[0] for f in failures})} passed, "
          f"{len({f.split(':')[0] for f in failures})} failed; unknown keys: "
          f"{sum('rejected' in f for f in failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
