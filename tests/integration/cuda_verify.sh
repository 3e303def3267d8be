#!/bin/sh
# cuda_verify.sh MPIRUN TP_RUN EXAMPLES PLANS: tp-run verify through the CUDA backend on 2 GPUs (one process per
# GPU): the tiny models' plans pass in bf16 and the wrong plans still fail. Skips (exit 77) with one line unless
# this build has CUDA and 2 GPUs are visible.
mpirun="$1"; tp_run="$2"; examples="$3"; plans="$4"
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${n:-0}" -lt 2 ]; then echo "cuda_verify: fewer than 2 CUDA devices visible: skipped"; exit 77; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in tiny-llama tiny-gpt; do
  sed 's/^\(  dtype:\).*/\1 bf16/' "$examples/$m.yaml" >"$tmp/$m.yaml"
done
fail=0
run() {  # run WANT_RC ARGS...
  want="$1"; shift
  $mpirun -np 2 "$tp_run" verify "$@" --backend cuda >"$tmp/out" 2>&1; rc=$?
  if [ "$rc" -ne "$want" ]; then
    echo "cuda_verify: exit $rc, expected $want: tp-run verify $*"; tail -5 "$tmp/out"; fail=1
  else
    echo "cuda_verify: ok (exit $rc): tp-run verify $*"
  fi
}
run 0 "$tmp/tiny-llama.yaml" --preset sequence_parallel
run 0 "$tmp/tiny-llama.yaml" --preset sequence_parallel --async-tp
run 0 "$tmp/tiny-llama.yaml" --preset sequence_parallel --float8 tensorwise
run 0 "$tmp/tiny-gpt.yaml" --preset vanilla
run 1 "$tmp/tiny-llama.yaml" --plan "$plans/wrong_wo_partial.yaml"
run 1 "$tmp/tiny-gpt.yaml" --plan "$plans/wrong_embedding_partial.yaml"
exit $fail
