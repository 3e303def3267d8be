#!/bin/sh
# shrink_verify.sh TP_PLAN TP_RUN MPIRUN CONFIG OUT [PLAN]: without PLAN, searches CONFIG (tp-plan search --out-plan
# --verify), then runs the exact `tp-run verify ... --shrink` command the search printed, at the winner's TP degree.
# With PLAN, verifies that plan file on CONFIG's model, shrunk. Prints everything; the exit status is tp-run's.
tp_plan="$1"; tp_run="$2"; mpirun="$3"; config="$4"; out="$5"; plan="$6"
mkdir -p "$(dirname "$out")" || exit 3
if [ -z "$plan" ]; then
  plan="$out.plan.yaml"
  "$tp_plan" search "$config" --out-plan "$plan" --verify --quiet --top 3 > "$out.search.txt" || exit 3
  cmd=$(grep -E '^  mpirun --oversubscribe -np [0-9]+ tp-run verify ' "$out.search.txt" | sed 's/^  //')
  [ -n "$cmd" ] || { cat "$out.search.txt"; echo "shrink_verify: the search printed no verify command"; exit 3; }
  echo "search printed: $cmd"
  np=$(printf '%s\n' "$cmd" | sed -E 's/.* -np ([0-9]+) .*/\1/')
else
  np=$(sed -nE 's/^tp_degree: *([0-9]+).*/\1/p' "$plan")
fi
start=$(date +%s.%N)
"$mpirun" --oversubscribe --allow-run-as-root -np "$np" "$tp_run" verify "$config" --plan "$plan" --shrink
rc=$?
echo "shrink_verify: tp $np, $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }") s, exit $rc"
exit $rc
