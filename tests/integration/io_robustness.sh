#!/usr/bin/env bash
# io_robustness.sh CASE TP_PLAN EXAMPLES_DIR [TP_RUN [MPIRUN]]: hostile inputs and failing outputs (issue 21, items 10-14), each a one-line
# error with exit 2, never a crash, a hang, an "internal error" (exit 3), or a file half written.
#   deep_json     100k nested brackets as --hf-config, --measured profile, check baseline, calibrate profile
#   bad_json      1e400, a key twice in one object, a non-string "format", version / ranks 2^32+1 (which wrapped to 1)
#   not_utf8      a model name in Latin-1 (its byte reached the JSON report: type_error 316, exit 3)
#   dev_zero      /dev/zero as every kind of input (it was read until memory ran out) and a FIFO without a writer
#   empty_file    an empty config, plan and profile say "empty file" (not "cannot read")
#   full_disk     --json /dev/full and stdout on /dev/full (exit 0 with the output lost)
#   atomic        a --report / check --update that fails leaves the previous file as it was; of several outputs,
#                 one that fails replaces none
#   output_input  an output that is an input (search C --out-plan C, calibrate p.json --out p.json) is refused
#                 (issue 37: calibrate --separate's derived names over its profiles; every output over a config's
#                 model.hf_config, through links and other spellings)
#   output_bound  a pipeline of more actions than one output lists (1,000,000) is refused before it is rendered
#                 (issue 37: 8.4 million actions wrote a 2.8 GB report and a 1.5 GB trace in 14 GB of memory)
#   tp_run        tp-run verify / profile / bench writing to /dev/full (a file or stdout) exit 2 naming it; a config
#                 that is /dev/zero is refused; with MPIRUN, `--json -` under mpirun (which loses what it cannot
#                 write and exits 0) is refused
set -uo pipefail
case_name="$1"; tp_plan="$2"; examples="$3"; tp_run="${4:-}"; mpirun="${5:-}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
cfg="$examples/tiny-llama.yaml"
failures=0

# expect_error NAME REGEX ARGS...: tp-plan ARGS (within 20 s) exits 2 with one line on stderr matching REGEX.
expect_error() {
  local name="$1" regex="$2"; shift 2
  local err rc
  err=$(timeout 20 "$tp_plan" "$@" 2>&1 >/dev/null); rc=$?
  if [ "$rc" -ne 2 ] || [ "$(printf '%s\n' "$err" | wc -l)" -ne 1 ] || ! printf '%s\n' "$err" | grep -Eq -- "$regex"; then
    echo "FAIL: $name: exit $rc (expected 2 and one line matching /$regex/):"
    printf '%s\n' "$err" | head -c 2000
    failures=$((failures + 1))
  else
    echo "ok: $name: $err"
  fi
}

# same_content NAME FILE EXPECTED: FILE still holds EXPECTED.
same_content() {
  if [ "$(cat "$2")" != "$3" ]; then
    echo "FAIL: $1: $2 changed: $(head -c 200 "$2")"
    failures=$((failures + 1))
  else
    echo "ok: $1"
  fi
}

# A valid profile, for the cases that alter one field of it.
profile() {  # profile FORMAT_JSON VERSION_JSON RANKS_JSON
  printf '{"format": %s, "version": %s, "environment": {"backend": "cpu", "device": "x", "ranks": %s},\n' "$1" "$2" "$3"
  printf ' "ops": [{"name": "tok_embeddings.fwd", "time_us": {"median": 1}}]}\n'
}
bench() {  # bench RANKS_JSON: a collectives bench file
  printf '{"format": "tptune-bench", "version": 1, "bench": "collectives",\n'
  printf ' "environment": {"backend": "cpu", "device": "x", "ranks": 2},\n'
  printf ' "results": [{"collective": "all_reduce", "bytes": 1024, "ranks": %s, "time_us": {"median": 5}}]}\n' "$1"
}

case "$case_name" in
deep_json)
  # 100k levels under a key whose value the error echoes: dumping it recursed once per level (SIGSEGV).
  deep=$(python3 -c 'print("[" * 100000 + "]" * 100000)')
  printf '{"architectures": ["LlamaForCausalLM"],\n "hidden_size": %s}\n' "$deep" > "$tmp/deep-hf.json"
  expect_error "deep --hf-config" "deep-hf.json:2: invalid JSON: nested deeper than 64 levels$" \
    simulate "$cfg" --preset vanilla --hf-config "$tmp/deep-hf.json"
  printf '{"format": %s}\n' "$deep" > "$tmp/deep.json"
  expect_error "deep --measured" "deep.json:1: invalid JSON \(expected a tp-run profile\): nested deeper than 64" \
    simulate "$cfg" --preset vanilla --tp 2 --trace "$tmp/t.json" --measured "$tmp/deep.json"
  expect_error "deep baseline" "deep.json:1: invalid JSON \(expected a tptune-check-baseline file\): nested deeper" \
    check "$cfg" --preset vanilla --baseline "$tmp/deep.json"
  expect_error "deep calibrate profile" "deep.json:1: invalid JSON .*nested deeper than 64 levels" \
    calibrate "$tmp/deep.json" --out "$tmp/c.yaml"
  # Deep objects, in a key nobody reads: refused all the same, before anything is built.
  python3 -c 'print("{\"format\": \"tptune-profile\",\n \"x\": " + "{\"a\":" * 100000 + "1" + "}" * 100000 + "}")' \
    > "$tmp/deep-object.json"
  expect_error "deep object in a profile" "deep-object.json:2: invalid JSON .*nested deeper than 64 levels" \
    accuracy "$tmp/deep-object.json"
  ;;
bad_json)
  printf '{\n  "architectures": ["LlamaForCausalLM"],\n  "hidden_size": 1e400\n}\n' > "$tmp/big.json"
  expect_error "1e400 in --hf-config" "big.json:3: invalid JSON: number overflow parsing '1e400'" \
    simulate "$cfg" --preset vanilla --hf-config "$tmp/big.json"
  # A key twice in one object (issue 37, class 11): nlohmann kept the last, so hidden_size read as 8192 silently.
  printf '{\n  "architectures": ["LlamaForCausalLM"],\n  "hidden_size": 4096,\n  "hidden_size": 8192\n}\n' \
    > "$tmp/twice.json"
  expect_error "a key twice in --hf-config" \
    'twice.json:4: invalid JSON: duplicate key "hidden_size" \(first on line 3\): a key is stated once per object$' \
    simulate "$cfg" --preset vanilla --hf-config "$tmp/twice.json"
  profile 3 1 2 > "$tmp/format3.json"
  expect_error "non-string format, --measured" "format3.json: format: expected a string, got 3$" \
    simulate "$cfg" --preset vanilla --tp 2 --trace "$tmp/t.json" --measured "$tmp/format3.json"
  expect_error "non-string format, calibrate" "format3.json: format: expected a string, got 3$" \
    calibrate "$tmp/format3.json" --out "$tmp/c.yaml"
  profile '"tptune-profile"' 4294967297 2 > "$tmp/version.json"
  expect_error "version 2^32+1, --measured" "version.json: version: expected 1" \
    simulate "$cfg" --preset vanilla --tp 2 --trace "$tmp/t.json" --measured "$tmp/version.json"
  expect_error "version 2^32+1, calibrate" "version.json: version: expected 1" \
    calibrate "$tmp/version.json" --out "$tmp/c.yaml"
  profile '"tptune-profile"' 1 4294967297 > "$tmp/ranks.json"
  expect_error "environment.ranks 2^32+1" \
    "ranks.json: environment.ranks: expected an integer in 1..1048576, got 4294967297$" \
    calibrate "$tmp/ranks.json" --out "$tmp/c.yaml"
  bench 4294967297 > "$tmp/bench-ranks.json"
  expect_error "bench results[0].ranks 2^32+1" \
    "bench-ranks.json: results\[0\].ranks: expected an integer in 1..1048576, got 4294967297$" \
    calibrate "$tmp/bench-ranks.json" --out "$tmp/c.yaml"
  printf '{"format": 1}\n' > "$tmp/baseline-format.json"
  expect_error "non-string baseline format" "baseline-format.json: format: expected the string" \
    check "$cfg" --preset vanilla --baseline "$tmp/baseline-format.json"
  ;;
not_utf8)
  # A Latin-1 model name (0xe9): yaml-cpp passes the byte on, and the JSON report's dump() threw type_error 316.
  { printf 'model:\n  name: caf\xe9\n'; grep -v '^model:' "$cfg"; } > "$tmp/latin1.yaml"
  expect_error "Latin-1 model name" "latin1.yaml:2: invalid UTF-8 \(byte 0xe9\); expected a config YAML file in UTF-8$" \
    simulate "$tmp/latin1.yaml" --preset vanilla --json -
  # A path that is not UTF-8 (Linux allows any bytes) is echoed into the JSON report: replaced, never thrown on.
  cp "$cfg" "$tmp/$(printf 'caf\xe9').yaml"
  out=$("$tp_plan" simulate "$tmp/$(printf 'caf\xe9').yaml" --preset vanilla --json - 2>&1); rc=$?
  if [ "$rc" -ne 0 ] || ! printf '%s' "$out" | python3 -c 'import json,sys; json.load(sys.stdin)'; then
    echo "FAIL: a config path that is not UTF-8: exit $rc, or the JSON does not parse"; failures=$((failures + 1))
  else
    echo "ok: a config path that is not UTF-8 gives a JSON report"
  fi
  ;;
dev_zero)
  expect_error "/dev/zero as config" "/dev/zero: not a regular file \(a character device; expected a config YAML file\)$" \
    simulate /dev/zero --preset vanilla
  expect_error "/dev/zero as --plan" "/dev/zero: not a regular file \(a character device; expected a plan YAML file\)$" \
    simulate "$cfg" --plan /dev/zero
  expect_error "/dev/zero as --hf-config" "/dev/zero: not a regular file .*expected a transformers config.json file\)$" \
    simulate "$cfg" --preset vanilla --hf-config /dev/zero
  expect_error "/dev/zero as --calibration" "/dev/zero: not a regular file .*expected a calibration YAML file\)$" \
    simulate "$cfg" --preset vanilla --calibration /dev/zero
  expect_error "/dev/zero as --measured" "/dev/zero: not a regular file .*expected a tp-run profile JSON file\)$" \
    simulate "$cfg" --preset vanilla --trace "$tmp/t.json" --measured /dev/zero
  expect_error "/dev/zero as baseline" "/dev/zero: not a regular file .*expected a check baseline JSON file\)" \
    check "$cfg" --preset vanilla --baseline /dev/zero
  expect_error "/dev/zero to calibrate" "/dev/zero: not a regular file .*expected a tp-run profile or bench JSON" \
    calibrate /dev/zero --out "$tmp/c.yaml"
  expect_error "/dev/zero to export" "/dev/zero: not a regular file .*expected a plan YAML file\)$" \
    export /dev/zero
  mkfifo "$tmp/fifo"
  expect_error "a FIFO as config" "fifo: not a regular file \(a FIFO; expected a config YAML file\)$" \
    explain "$tmp/fifo" --preset vanilla
  ;;
empty_file)
  : > "$tmp/empty.yaml"
  expect_error "empty config" "empty.yaml: empty file \(expected a config YAML file\)$" simulate "$tmp/empty.yaml" --preset vanilla
  expect_error "empty plan" "empty.yaml: empty file \(expected a plan YAML file\)$" simulate "$cfg" --plan "$tmp/empty.yaml"
  : > "$tmp/empty.json"
  expect_error "empty profile" "empty.json: empty file \(expected a tp-run profile or bench JSON file\)$" \
    accuracy "$tmp/empty.json"
  expect_error "empty --hf-config" "empty.json: empty file \(expected a transformers config.json file\)$" \
    explain "$cfg" --preset vanilla --hf-config "$tmp/empty.json"
  ;;
full_disk)
  [ -w /dev/full ] || { echo "skip: no /dev/full"; exit 77; }
  expect_error "simulate --json /dev/full" "^tp-plan: error: --json /dev/full: cannot write: No space left on device$" \
    simulate "$cfg" --preset vanilla --json /dev/full
  expect_error "search --trace /dev/full" "^tp-plan: error: --trace /dev/full: cannot write: No space left on device$" \
    search "$cfg" --quiet --trace /dev/full
  expect_error "explain --json /dev/full" "^tp-plan: error: --json /dev/full: cannot write" \
    explain "$cfg" --preset vanilla --json /dev/full
  # Standard output on a full disk: the text report, and JSON on stdout.
  for args in "simulate $cfg --preset vanilla" "simulate $cfg --preset vanilla --json -" "search $cfg --quiet"; do
    err=$($tp_plan $args 2>&1 >/dev/full); rc=$?
    if [ "$rc" -ne 2 ] || ! printf '%s\n' "$err" | grep -Eq "^tp-plan: error: cannot write to standard output: [A-Za-z ]+$"; then
      echo "FAIL: $args > /dev/full: exit $rc: $err"; failures=$((failures + 1))
    else
      echo "ok: $args > /dev/full: $err"
    fi
  done
  ;;
atomic)
  # A report that cannot be written whole (files limited to 1 KiB, SIGXFSZ ignored: a disk that fills up mid-write,
  # for root too) must leave the previous report; nothing else may appear in the folder.
  mkdir "$tmp/out"
  echo "previous report" > "$tmp/out/r.html"
  err=$(bash -c 'trap "" XFSZ; ulimit -f 1; exec "$@"' _ "$tp_plan" simulate "$cfg" --preset vanilla \
        --report "$tmp/out/r.html" 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ] && printf '%s\n' "$err" | grep -q -- "--report $tmp/out/r.html: cannot write: File too large" ||
    { echo "FAIL: a failing --report: exit $rc: $err"; failures=$((failures + 1)); }
  same_content "a failing --report leaves the previous file" "$tmp/out/r.html" "previous report"
  [ "$(ls -A "$tmp/out")" = "r.html" ] || { echo "FAIL: left behind: $(ls -A "$tmp/out")"; failures=$((failures + 1)); }
  # check --update: the committed baseline survives a write that fails.
  "$tp_plan" check "$cfg" --preset vanilla --baseline "$tmp/b.json" --update > /dev/null || failures=$((failures + 1))
  before=$(cat "$tmp/b.json")
  err=$(bash -c 'trap "" XFSZ; ulimit -f 1; exec "$@"' _ "$tp_plan" check "$cfg" --preset sequence_parallel \
        --baseline "$tmp/b.json" --update 2>&1 >/dev/null); rc=$?
  [ "$rc" -eq 2 ] || { echo "FAIL: a failing check --update: exit $rc: $err"; failures=$((failures + 1)); }
  same_content "a failing check --update leaves the baseline" "$tmp/b.json" "$before"
  # Several outputs: the report's folder is a file, so the --json written "first" must not be replaced either.
  echo "previous json" > "$tmp/s.json"
  echo "a file" > "$tmp/notdir"
  expect_error "a --report whose folder is a file" "--report $tmp/notdir/r.html: cannot write: Not a directory$" \
    simulate "$cfg" --preset vanilla --json "$tmp/s.json" --trace "$tmp/t.json" --report "$tmp/notdir/r.html"
  same_content "the --json of a failed run is not replaced" "$tmp/s.json" "previous json"
  [ ! -e "$tmp/t.json" ] || { echo "FAIL: the --trace of a failed run was written"; failures=$((failures + 1)); }
  ;;
output_input)
  cp "$cfg" "$tmp/c.yaml"
  before=$(cat "$tmp/c.yaml")
  expect_error "search C --out-plan C" "--out-plan $tmp/c.yaml: is also the config $tmp/c.yaml; refusing to overwrite an input" \
    search "$tmp/c.yaml" --quiet --out-plan "$tmp/c.yaml"
  same_content "search C --out-plan C leaves C" "$tmp/c.yaml" "$before"
  cp "$cfg" "$tmp/c.yaml"  # as it was, whatever the check above did
  expect_error "simulate --report over the config (another spelling)" "--report $tmp/./c.yaml: is also the config" \
    simulate "$tmp/c.yaml" --preset vanilla --report "$tmp/./c.yaml"
  expect_error "--json and --trace on one path" "--trace $tmp/o.json: is also the --json output" \
    simulate "$tmp/c.yaml" --preset vanilla --json "$tmp/o.json" --trace "$tmp/o.json"
  echo '{"format": "tptune-profile"}' > "$tmp/p.json"
  expect_error "calibrate p.json --out p.json" "--out $tmp/p.json: is also the profile $tmp/p.json; refusing" \
    calibrate "$tmp/p.json" --out "$tmp/p.json"
  same_content "calibrate p.json --out p.json leaves p.json" "$tmp/p.json" '{"format": "tptune-profile"}'
  "$tp_plan" search "$tmp/c.yaml" --quiet --out-plan "$tmp/best.yaml" > /dev/null
  best=$(cat "$tmp/best.yaml")
  expect_error "export P --out P" "--out $tmp/best.yaml: is also the plan" export "$tmp/best.yaml" --out "$tmp/best.yaml"
  same_content "export P --out P leaves P" "$tmp/best.yaml" "$best"
  cp "$cfg" "$tmp/c.yaml"  # as it was, whatever the check above did
  expect_error "check --update over the config" "--baseline $tmp/c.yaml: is also the config" \
    check "$tmp/c.yaml" --preset vanilla --baseline "$tmp/c.yaml" --update
  same_content "check --update over the config leaves it" "$tmp/c.yaml" "$before"
  # Issue 37, class 1: calibrate --separate's derived names (OUT-1, OUT-2) over its own profiles.
  bench 2 > "$tmp/b-1.json"
  bench 2 | sed 's/"device": "x"/"device": "y"/' > "$tmp/b-2.json"  # another environment: fitted apart
  expect_error "calibrate b-1 b-2 --separate --out b.json" \
    "--separate $tmp/b-1.json: is also the profile $tmp/b-1.json; refusing to overwrite an input" \
    calibrate "$tmp/b-1.json" "$tmp/b-2.json" --separate --out "$tmp/b.json"
  same_content "calibrate --separate leaves b-1.json" "$tmp/b-1.json" "$(bench 2)"
  same_content "calibrate --separate leaves b-2.json" "$tmp/b-2.json" "$(bench 2 | sed 's/"device": "x"/"device": "y"/')"
  # Issue 37, class 2: a file the config names (model.hf_config), whichever output and spelling reaches it.
  mkdir "$tmp/hf"
  hf_json='{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
 "num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 256}'
  printf '%s\n' "$hf_json" > "$tmp/hf/config.json"
  printf 'model: {hf_config: hf/config.json}\ntraining: {seq_len: 32, local_batch_size: 2, dtype: fp32}\n%s\n' \
    'cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 4}' > "$tmp/h.yaml"
  ln "$tmp/hf/config.json" "$tmp/hard.json"
  ln -s "$tmp/hf/config.json" "$tmp/soft.json"
  refusal="is also the transformers config.json $tmp/hf/config.json; refusing to overwrite an input"
  expect_error "simulate --json over model.hf_config" "^tp-plan: error: --json $tmp/hf/config.json: $refusal" \
    simulate "$tmp/h.yaml" --preset sequence_parallel --tp 2 --json "$tmp/hf/config.json"
  expect_error "search --out-plan over it (a symlink)" "^tp-plan: error: --out-plan $tmp/soft.json: $refusal" \
    search "$tmp/h.yaml" --quiet --tp 2 --out-plan "$tmp/soft.json"
  expect_error "explain --json over it (a hard link)" "^tp-plan: error: --json $tmp/hard.json: $refusal" \
    explain "$tmp/h.yaml" --preset sequence_parallel --tp 2 --json "$tmp/hard.json"
  expect_error "simulate --report over it (another spelling)" "^tp-plan: error: --report $tmp/hf/../hf/config.json: $refusal" \
    simulate "$tmp/h.yaml" --preset vanilla --tp 2 --report "$tmp/hf/../hf/config.json"
  expect_error "export --out over it" "^tp-plan: error: --out $tmp/hf/config.json: $refusal" \
    export "$tmp/best.yaml" --format python --config "$tmp/h.yaml" --out "$tmp/hf/config.json"
  same_content "every output leaves model.hf_config" "$tmp/hf/config.json" "$hf_json"
  ;;
tp_run)
  [ -w /dev/full ] || { echo "skip: no /dev/full"; exit 77; }
  # Without mpirun: one rank (tp 1). A failing write ends the run through MPI_Abort, which adds its own lines; the
  # check is the exit status and tp-run's line.
  run_fails() {  # run_fails NAME REGEX [>/dev/full] ARGS...
    local name="$1" regex="$2"; shift 2
    local err rc
    if [ "$1" = "--stdout-full" ]; then
      shift; err=$(timeout 60 "$tp_run" "$@" 2>&1 >/dev/full); rc=$?
    else
      err=$(timeout 60 "$tp_run" "$@" 2>&1 >/dev/null); rc=$?
    fi
    if [ "$rc" -ne 2 ] || ! printf '%s\n' "$err" | grep -Eq -- "$regex"; then
      echo "FAIL: $name: exit $rc (expected 2 and /$regex/):"; printf '%s\n' "$err" | head -c 2000
      failures=$((failures + 1))
    else
      echo "ok: $name"
    fi
  }
  run_fails "verify --json /dev/full" "tp-run: error.*--json /dev/full: cannot write: No space left on device" \
    verify "$cfg" --preset vanilla --json /dev/full
  run_fails "verify > /dev/full" "^tp-run: error: cannot write to standard output: " \
    --stdout-full verify "$cfg" --preset vanilla
  run_fails "profile --out /dev/full" "tp-run: error.*--out /dev/full: cannot write: No space left on device" \
    profile "$cfg" --preset vanilla --warmup 0 --iters 1 --quiet --out /dev/full
  run_fails "bench --json /dev/full" "tp-run: error.*--json /dev/full: cannot write: No space left on device" \
    bench memory --warmup 0 --iters 1 --max-bytes 8K --json /dev/full
  run_fails "bench > /dev/full" "^tp-run: error: cannot write to standard output" \
    --stdout-full bench memory --warmup 0 --iters 1 --max-bytes 8K
  run_fails "/dev/zero as config" "/dev/zero: not a regular file" verify /dev/zero --preset vanilla
  cp "$cfg" "$tmp/c.yaml"
  run_fails "profile --out over the config" "--out $tmp/c.yaml: is also the config" \
    profile "$tmp/c.yaml" --preset vanilla --out "$tmp/c.yaml"
  same_content "profile --out over the config leaves it" "$tmp/c.yaml" "$(cat "$cfg")"
  # Issue 37, class 2: the output check knows every file read, the config's model.hf_config included.
  mkdir "$tmp/hf"
  printf '%s\n' '{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,' \
    '"num_attention_heads": 8, "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 256}' \
    > "$tmp/hf/config.json"
  hf_json=$(cat "$tmp/hf/config.json")
  printf 'model: {hf_config: hf/config.json}\ntraining: {seq_len: 32, local_batch_size: 2, dtype: fp32}\n' > "$tmp/h.yaml"
  run_fails "verify --json over model.hf_config" \
    "^tp-run: error: --json $tmp/hf/config.json: is also the transformers config.json $tmp/hf/config.json; refusing" \
    verify "$tmp/h.yaml" --preset vanilla --json "$tmp/hf/config.json"
  same_content "verify --json over model.hf_config leaves it" "$tmp/hf/config.json" "$hf_json"
  # Issue 37, class 12: under mpirun, rank 0's stdout is mpirun's pipe; mpirun lost the JSON on /dev/full and exited 0.
  if [ -n "$mpirun" ]; then
    err=$(timeout 60 "$mpirun" -np 1 "$tp_run" verify "$cfg" --preset vanilla --json - 2>&1 >/dev/full); rc=$?
    if [ "$rc" -eq 0 ] || ! printf '%s\n' "$err" | grep -Eq -- \
        "^tp-run: error: --json -: standard output passes through .*, which loses what it cannot write without an error \(exit 0\); write the JSON to a file: --json FILE$"; then
      echo "FAIL: mpirun verify --json - > /dev/full: exit $rc:"; printf '%s\n' "$err" | head -c 2000
      failures=$((failures + 1))
    else
      echo "ok: mpirun verify --json - > /dev/full: exit $rc"
    fi
  fi
  ;;
output_bound)
  # pp 256 x 2048 microbatches of 1F1B: 2 x 256 x 2048 = 1,048,576 actions, 48,576 past the bound (0.5 s to refuse).
  sed -e 's/n_layers: 2$/n_layers: 256/' -e 's/local_batch_size: 2$/local_batch_size: 2048/' \
    -e 's/gpus_per_node: 4$/gpus_per_node: 256/' "$cfg" > "$tmp/pp.yaml"
  mkdir "$tmp/out"
  expect_error "simulate of 1,048,576 pipeline actions with every output" \
    "^tp-plan: error: --trace: 1048576 pipeline actions \(pp 256, 2048 microbatches, 1 stage per rank\), more than 1000000, the most one output lists \(docs/file-formats.md\); fewer microbatches .* or a smaller pp list fewer; or leave --trace out$" \
    simulate "$tmp/pp.yaml" --preset vanilla --tp 1 --pp 256 --json "$tmp/out/s.json" --trace "$tmp/out/t.json" \
    --report "$tmp/out/r.html"
  [ -z "$(ls -A "$tmp/out")" ] || { echo "FAIL: written: $(ls -A "$tmp/out")"; failures=$((failures + 1)); }
  ;;
*)
  echo "io_robustness.sh: unknown case '$case_name'"; exit 2 ;;
esac
exit $((failures > 0))
