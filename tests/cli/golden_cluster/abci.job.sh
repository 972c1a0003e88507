#!/bin/bash
#$ -N fmnist-resnet
#$ -l rt_F=2
#$ -l h_rt=01:00:00
#$ -j y
#$ -o @JOB@/out/job.out
# shellcheck disable=SC1090,SC1091  # the set-up lines source the cluster's own files
# hpcnn job 'fmnist-resnet' made by scripts/cluster/launch.py from abci.json and train.json.
# Submit from @JOB@: qsub -g gaa00000 job.sh. Output: out/ (stage.log, envcheck.log, summary.json, trained.onnx).
set -eo pipefail  # -u after the set-up lines: module scripts read unset variables
export HPCNN_JOB_ID="${JOB_ID}"
job_dir=@JOB@
source /etc/profile.d/modules.sh
module load cuda/12.2/12.2.0
module load nccl/2.18/2.18.3-1
module load hpcx/2.12
set -u
# shellcheck source=/dev/null
source "$job_dir/env.sh"
finish() {
  local status=$?
  [ "$status" = 0 ] || echo "hpcnn: job $HPCNN_JOB_ID: FAILED with exit status $status (the lines above say where)" >&2
  mpirun -np 2 --map-by ppr:1:node --bind-to none --hostfile "$SGE_JOB_HOSTLIST" bash "$job_dir/cleanup.sh" "$HPCNN_JOB_ID" || true
  return "$status"
}
trap finish EXIT
echo "hpcnn: job $HPCNN_JOB_ID: staging and checking 2 node(s)"
mpirun -np 2 --map-by ppr:1:node --bind-to none --hostfile "$SGE_JOB_HOSTLIST" bash "$job_dir/stage.sh" "$HPCNN_JOB_ID"
echo "hpcnn: job $HPCNN_JOB_ID: training with 8 rank(s)"
mpirun -np 8 --map-by ppr:4:node:PE=10 --bind-to core --hostfile "$SGE_JOB_HOSTLIST" bash "$job_dir/rank.sh" "$HPCNN_JOB_ID" > "$job_dir/out/summary.json.part"
mv "$job_dir/out/summary.json.part" "$job_dir/out/summary.json"
echo "hpcnn: job $HPCNN_JOB_ID: done: $job_dir/out/trained.onnx"
