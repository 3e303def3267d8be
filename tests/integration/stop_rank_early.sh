#!/bin/sh
# stop_rank_early.sh STAGE TP_RUN CONFIG MPIRUN...: the --timeout deadline holds from process start
# (tools/tp_run/watchdog.h). Runs
#   MPIRUN -np 2 tp-run verify CONFIG --preset vanilla --timeout 3
# with rank 1 stopping itself (SIGSTOP, TPTUNE_TP_RUN_STOP_AT=STAGE) at STAGE:
#   init         before MPI_Init: rank 0 waits in MPI_Init (or, if its MPI_Init returns alone, MPI_Comm_split_type)
#   consistency  before the cross-rank consistency check: rank 0 waits in the check's collectives
#   finalize     before MPI_Finalize: rank 0 waits in MPI_Finalize
# and passes when every process is gone within 15 s, the exit status is non-zero, and rank 0 printed one line
# naming what did not complete within 3 s. Without a deadline on those MPI calls, init and consistency hang forever
# (here: until the 40 s kill).
stage="$1"; tp_run="$2"; config="$3"; shift 3
marker="--timeout 3 --seed $$"  # this run's processes, for the leftover check
start=$(date +%s)
# The rank's shell exports the hook for rank 1 only, then becomes tp-run (exec keeps the pid mpirun watches).
out=$(timeout -s KILL 40 "$@" -np 2 sh -c \
  'r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}; if [ "$r" = 1 ]; then export TPTUNE_TP_RUN_STOP_AT="$0"; fi; exec "$@"' \
  "$stage" "$tp_run" verify "$config" --preset vanilla $marker 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
printf '%s\n' "$out"
echo "stop_rank_early.sh ($stage): exit code $rc after ${elapsed} s"
left=$(pgrep -f -- "$marker" || true)
if [ -n "$left" ]; then
  echo "stop_rank_early.sh: processes left behind: $left" >&2
  kill -KILL $left 2>/dev/null
  exit 1
fi
[ "$rc" -ne 0 ] && [ "$rc" -ne 137 ] || { echo "stop_rank_early.sh: expected a non-zero exit before the 40 s kill" >&2; exit 1; }
[ "$elapsed" -le 15 ] || { echo "stop_rank_early.sh: took ${elapsed} s, expected at most 15" >&2; exit 1; }
errors=$(printf '%s\n' "$out" | grep "^tp-run: error")
n=$(printf '%s\n' "$errors" | grep -c "^tp-run: error (rank 0 of 2): ")
[ "$n" -eq 1 ] || { echo "stop_rank_early.sh: rank 0 printed $n error lines, expected 1" >&2; exit 1; }
# Every tp-run line names what did not complete; the stopped rank may report too (Open MPI sends it SIGCONT before
# SIGTERM, and its own deadline has passed by then).
msg="^tp-run: error \(rank [01] of 2\): .+ did not complete within 3 s \(tp-run --timeout\): a peer rank is stopped, hung or slower than the timeout$"
[ -z "$(printf '%s\n' "$errors" | grep -Ev "$msg")" ] ||
  { echo "stop_rank_early.sh: a message does not name what did not complete within 3 s" >&2; exit 1; }
exit 0
