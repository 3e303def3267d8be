#!/bin/sh
# huge_value.sh TP_PLAN: runs `tp-plan explain` on a config whose model.mlp is a 100 KB value (issue 8: such values
# were echoed whole into the error). Exits with tp-plan's status; the caller checks the message.
f=$(mktemp)
{ printf 'model:\n  preset: tiny-llama\n  mlp: '; head -c 100000 /dev/zero | tr '\0' x; echo; } > "$f"
"$1" explain "$f" --preset vanilla --tp 2
rc=$?
rm -f "$f"
exit $rc
