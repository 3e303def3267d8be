#!/usr/bin/env bash
# export_injection.sh TP_PLAN EXAMPLES_DIR CONFIGS_DIR: user text never becomes a line of generated code (issue 21, item 5).
# A plan's family, the plan file's name, a config's model.name and an HF config's _name_or_path each carry a newline
# followed by `rm -rf "$HOME/tptune-injected"`. Every export (torchtitan shell script, python plan, TOML) must
#   - parse (`bash -n`; python's ast.parse),
#   - hold the payload only inside a comment or string token (shell: a line starting with '#'; python: tokenize),
# and a model whose name carries the payload but whose dimensions are no recipe's is refused in one line, exit 2.
set -uo pipefail
tp_plan="$1"; examples="$2"; configs="$3"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
ok() { echo "ok: $*"; }

payload='rm -rf "$HOME/tptune-injected"'
# The plan: a torchtitan-0.3 search winner (enable_sp off) with a hostile family; its file name carries the payload
# too.
plan="$tmp/plan
rm -rf tptune-injected #.yaml"
"$tp_plan" search "$configs/tt03_vanilla_search.yaml" --quiet --out-plan "$tmp/best.yaml" >/dev/null 2>&1 ||
  { echo "FAIL: search"; exit 1; }
{
  echo 'family: "vanilla\nrm -rf \"$HOME/tptune-injected\"\r\n# "'
  grep -v '^family:' "$tmp/best.yaml"
} >"$plan"
# A config whose model is the 8B's dimensions under a hostile name (the export names the recipe by dimensions).
cat >"$tmp/named.yaml" <<'YAML'
model: {preset: llama3-8b, name: "llama\nrm -rf \"$HOME/tptune-injected\"\n"}
training: {seq_len: 8192, local_batch_size: 1}
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}
YAML
# The same through an HF config.json's _name_or_path.
python3 - "$examples/hf/llama3-8b/config.json" "$tmp/hf.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
j["_name_or_path"] = 'meta-llama/x\nrm -rf "$HOME/tptune-injected"\n'
json.dump(j, open(sys.argv[2], "w"))
PY

# check_shell FILE WHAT / check_python FILE WHAT / check_toml FILE WHAT
check_shell() {
  if ! bash -n "$1" 2>"$tmp/err"; then fail "$2: bash -n: $(cat "$tmp/err")"; return; fi
  if grep -F -- 'tptune-injected' "$1" | grep -vq '^#'; then fail "$2: the payload is on a line that is not a comment"; cat "$1"
  else ok "$2: parses, the payload only in comments"; fi
}
check_python() {
  if python3 - "$1" <<'PY'
import ast, io, sys, tokenize
src = open(sys.argv[1], encoding="utf-8").read()
ast.parse(src)
for t in tokenize.generate_tokens(io.StringIO(src).readline):
    if "tptune-injected" in t.string and t.type not in (tokenize.COMMENT, tokenize.STRING):
        sys.exit(f"payload in a {tokenize.tok_name[t.type]} token: {t.string!r}")
PY
  then ok "$2: parses, the payload only in comments or strings"; else fail "$2"; cat "$1"; fi
}
check_toml() {
  if grep -F -- 'tptune-injected' "$1" | grep -vq '^#'; then fail "$2: the payload is on a line that is not a comment"; cat "$1"
  else ok "$2: the payload only in comments"; fi
}

for cfg in "" "$tmp/named.yaml" "hf"; do
  args=(); what="plan only"
  if [ "$cfg" = hf ]; then args=(--config "$examples/llama3-8b-h100.yaml" --hf-config "$tmp/hf.json"); what="hf config"
  elif [ -n "$cfg" ]; then args=(--config "$cfg"); what="named model"; fi
  for f in torchtitan python torchtitan-toml; do
    [ "$f" = torchtitan ] && [ -z "$cfg" ] && continue  # needs --config (tested as a one-line error in export.cmake)
    out="$tmp/out.$f"
    if ! "$tp_plan" export "$plan" "${args[@]}" --format "$f" -o "$out" 2>"$tmp/err"; then
      fail "$what: export --format $f: $(cat "$tmp/err")"; continue
    fi
    case "$f" in
      torchtitan) check_shell "$out" "$what: $f" ;;
      python) check_python "$out" "$what: $f" ;;
      *) check_toml "$out" "$what: $f" ;;
    esac
  done
done

# A model of no recipe whose name carries the payload: one line on stderr, exit 2, the newline shown as \n.
cat >"$tmp/custom.yaml" <<'YAML'
model: {name: "mine\nrm -rf \"$HOME/tptune-injected\"", dim: 4096, n_layers: 30, n_heads: 32, n_kv_heads: 8, ffn_dim: 14336, vocab_size: 128256}
training: {seq_len: 8192, local_batch_size: 1}
cluster: {gpu: h100-sxm, nodes: 1, gpus_per_node: 8}
YAML
"$tp_plan" export "$plan" --config "$tmp/custom.yaml" --format torchtitan >"$tmp/out" 2>"$tmp/err"; rc=$?
if [ "$rc" -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && [ ! -s "$tmp/out" ] &&
   grep -q "^tp-plan: error: model 'mine\\\\nrm -rf .*not the dimensions of torchtitan 0.3's llama3 8B, 70B or 405B recipe" "$tmp/err"; then
  ok "a model of no recipe is refused in one line"
else
  fail "a model of no recipe: exit $rc, stderr:"; cat "$tmp/err" "$tmp/out"
fi

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "all passed"
