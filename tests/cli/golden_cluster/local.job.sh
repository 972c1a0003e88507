#!/bin/bash
# shellcheck disable=SC1090,SC1091  # the set-up lines source the cluster's own files
# hpcnn job 'local' made by scripts/cluster/launch.py from local.json and train.json.
# Submit from @JOB@: bash job.sh. Output: out/ (stage.log, envcheck.log, summary.json, trained.onnx).
set -eo pipefail  # -u after the set-up lines: module scripts read unset variables
export HPCNN_JOB_ID="${HPCNN_JOB_ID:-local-$(date +%Y%m%d-%H%M%S)-$$}"
job_dir=@JOB@
set -u
# shellcheck source=/dev/null
source "$job_dir/env.sh"
finish() {
  local status=$?
  [ "$status" = 0 ] || echo "hpcnn: job $HPCNN_JOB_ID: FAILED with exit status $status (the lines above say where)" >&2
  mpirun -np 1 --map-by ppr:1:node --bind-to none bash "$job_dir/cleanup.sh" "$HPCNN_JOB_ID" || true
  return "$status"
}
trap finish EXIT
echo "hpcnn: job $HPCNN_JOB_ID: staging and checking 1 node(s)"
mpirun -np 1 --map-by ppr:1:node --bind-to none bash "$job_dir/stage.sh" "$HPCNN_JOB_ID"
echo "hpcnn: job $HPCNN_JOB_ID: training with 2 rank(s)"
mpirun -np 2 --map-by ppr:2:node --bind-to none bash "$job_dir/rank.sh" "$HPCNN_JOB_ID" > "$job_dir/out/summary.json.part"
mv "$job_dir/out/summary.json.part" "$job_dir/out/summary.json"
echo "hpcnn: job $HPCNN_JOB_ID: done: $job_dir/out/trained.onnx"
