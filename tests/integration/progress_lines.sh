#!/bin/sh
# progress_lines.sh COMMAND TP_RUN CONFIG MPIRUN...: progress under mpirun, where stderr is not a terminal
# (tools/progress.h). With TPTUNE_PROGRESS_INTERVAL_S=0.01 (instead of 10 s; the smallest it takes) and a job of a second or more:
#  1. each rank's stderr into its own file: rank 0 writes plain lines
#       "tp-run COMMAND: P% (D of T UNIT, E s, ETA ...)"      (COMMAND profile, verify or bench: tp-run bench gemm)
#     with D and P non-decreasing, no carriage return (no bar drawn into a file), and at most one line per interval
#     (elapsed / 0.01 + 1); rank 1 writes none;
#  2. stderr through mpirun's own pipe: the lines arrive there too.
# Before: nothing, since the bar is drawn on a terminal only.
command="$1"; tp_run="$2"; config="$3"; shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case "$command" in
  profile) run="profile $config --preset vanilla --warmup 1 --iters 60 --out $tmp/profile.json"; unit=steps ;;
  verify) run="verify $config --preset vanilla --local-batch-size 128"; unit=ops ;;
  bench) run="bench gemm --config $config --preset vanilla --iters 40"; unit=GEMMs; command="bench gemm" ;;
  *) echo "progress_lines.sh: COMMAND is profile, verify or bench" >&2; exit 1 ;;
esac
export TPTUNE_PROGRESS_INTERVAL_S=0.01
start=$(date +%s.%N)
timeout -s KILL 120 "$@" -np 2 sh -c \
  'r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; exec "$@" 2> "$0/stderr.$r"' \
  "$tmp" "$tp_run" $run > "$tmp/stdout" || {
  echo "progress_lines.sh: the run failed" >&2; cat "$tmp"/stderr.* >&2; exit 1; }
elapsed=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
echo "--- rank 0's stderr (${elapsed} s)"; cat "$tmp/stderr.0"
echo "--- rank 1's stderr"; cat "$tmp/stderr.1"
line="^tp-run $command: [0-9]+% \([0-9]+ of [0-9]+ $unit, [0-9.]+ s, ETA ([0-9.]+ s|[0-9]+ min [0-9]+ s|\?)\)$"
n=$(grep -Ec "$line" "$tmp/stderr.0")
[ "$n" -ge 2 ] || { echo "progress_lines.sh: rank 0 printed $n progress lines, expected 2 or more" >&2; exit 1; }
most=$(awk -v e="$elapsed" 'BEGIN { printf "%d", e / 0.01 + 1 }')
[ "$n" -le "$most" ] || { echo "progress_lines.sh: $n lines in $elapsed s: more than one per 0.01 s" >&2; exit 1; }
! grep -Eq "^tp-run $command: [0-9]+%" "$tmp/stderr.1" || { echo "progress_lines.sh: rank 1 printed progress" >&2; exit 1; }
! grep -q "$(printf '\r')" "$tmp/stderr.0" || { echo "progress_lines.sh: a carriage return in a file" >&2; exit 1; }
# Done counts and percentages never go back.
grep -E "$line" "$tmp/stderr.0" | sed -E 's/^[^:]*: ([0-9]+)% \(([0-9]+) of.*/\1 \2/' | awk '
  NR > 1 && ($1 < p || $2 < d) { bad = 1 } { p = $1; d = $2 } END { exit bad }' ||
  { echo "progress_lines.sh: progress went back" >&2; exit 1; }
# Through mpirun's pipe (stderr of every rank forwarded into one pipe).
piped=$(timeout -s KILL 120 "$@" -np 2 "$tp_run" $run 2>&1 >/dev/null | cat)
echo "--- through the pipe"; printf '%s\n' "$piped"
printf '%s\n' "$piped" | grep -Eq "$line" || { echo "progress_lines.sh: no progress line through the pipe" >&2; exit 1; }
exit 0
