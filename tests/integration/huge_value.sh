#!/bin/sh
# huge_value.sh TP_PLAN [KEY]: runs `tp-plan explain` on a config whose model.mlp (or, with KEY hf_config,
# model.hf_config: a path of 100 KB) is a 100 KB value (issue 8: such values were echoed whole into the error).
# Exits with tp-plan's status; the caller checks the message.
f=$(mktemp)
if [ "${2:-mlp}" = hf_config ]; then
  { printf 'model:\n  hf_config: '; head -c 100000 /dev/zero | tr '\0' x; echo; } > "$f"
else
  { printf 'model:\n  preset: tiny-llama\n  mlp: '; head -c 100000 /dev/zero | tr '\0' x; echo; } > "$f"
fi
"$1" explain "$f" --preset vanilla --tp 2
rc=$?
rm -f "$f"
exit $rc
