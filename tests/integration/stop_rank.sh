#!/bin/sh
# stop_rank.sh COMMAND TP_RUN CONFIG MPIRUN...: the watchdog of tp-run (--timeout). Runs
#   MPIRUN -np 2 tp-run COMMAND CONFIG --preset vanilla --timeout 3 ...
# stops rank 1 with SIGSTOP two seconds in (mid-run: it never joins its next collective), and passes when every
# process is gone within 15 s, the exit status is non-zero, and rank 0 printed one message naming the collective op
# that did not complete. Without the watchdog this hangs forever.
command="$1"; tp_run="$2"; config="$3"; shift 3
tmp=$(mktemp -d)
extra=""
[ "$command" = profile ] && extra="--warmup 1 --iters 1000000 --out $tmp/profile.json"
start=$(date +%s)
# The rank's shell starts a sleeper that stops it, then becomes tp-run (exec keeps the pid the sleeper stops).
out=$(timeout -s KILL 60 "$@" -np 2 sh -c \
  'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then (sleep 2; kill -STOP $$) & fi; exec "$@"' \
  sh "$tp_run" "$command" "$config" --preset vanilla --timeout 3 $extra 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$out"
echo "stop_rank.sh: exit code $rc after ${elapsed} s"
left=$(pgrep -f -- "$config --preset vanilla --timeout 3" || true)
if [ -n "$left" ]; then
  echo "stop_rank.sh: processes left behind: $left" >&2
  kill -KILL $left 2>/dev/null
  rm -rf "$tmp"; exit 1
fi
rm -rf "$tmp"
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ] || { echo "stop_rank.sh: expected a non-zero exit before the 60 s kill" >&2; exit 1; }
[ "$elapsed" -le 15 ] || { echo "stop_rank.sh: took ${elapsed} s, expected at most 15" >&2; exit 1; }
# One message per rank at most, each naming the op that did not complete: the op of the step
# (layers.0.attention.wo.all_reduce, output.bwd.all_reduce, ...) or, when the stop lands between steps, the profiler's
# own all-reduce of the op times. Rank 0 always reports; the stopped rank may too: Open MPI sends it SIGCONT before
# SIGTERM, and its own wait is then past the deadline.
msg="^tp-run: error \(rank [01] of 2\): ([A-Za-z0-9_.]+(all_reduce|all_gather|reduce_scatter|all_to_all|p2p)[A-Za-z0-9_.]*|profile: the all-reduce \(max\) of iteration [0-9]+'s op times): [a-z_]+ did not complete within 3 s"
errors=$(printf '%s\n' "$out" | grep "^tp-run: error")
for r in 0 1; do
  n=$(printf '%s\n' "$errors" | grep -c "(rank $r of 2)")
  [ "$n" -le 1 ] || { echo "stop_rank.sh: rank $r printed $n messages" >&2; exit 1; }
done
printf '%s\n' "$errors" | grep -q "(rank 0 of 2)" || { echo "stop_rank.sh: rank 0 did not report" >&2; exit 1; }
[ -z "$(printf '%s\n' "$errors" | grep -Ev "$msg")" ] ||
  { echo "stop_rank.sh: a message does not name the collective op that did not complete" >&2; exit 1; }
exit 0
