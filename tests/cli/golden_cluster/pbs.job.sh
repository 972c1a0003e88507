#!/bin/bash
#PBS -N fmnist-cnn
#PBS -l select=4:ncpus=36:mpiprocs=2:ompthreads=18
#PBS -l place=scatter:excl
#PBS -l walltime=04:00:00
#PBS -q workq
#PBS -A PRJ-1234
#PBS -j oe
#PBS -o @JOB@/out/job.out
# shellcheck disable=SC1090,SC1091  # the set-up lines source the cluster's own files
# hpcnn job 'fmnist-cnn' made by scripts/cluster/launch.py from pbs.json and train.json.
# Submit from @JOB@: qsub job.sh. Output: out/ (stage.log, envcheck.log, summary.json, trained.onnx).
set -eo pipefail  # -u after the set-up lines: module scripts read unset variables
export HPCNN_JOB_ID="${PBS_JOBID}"
job_dir=@JOB@
module load gcc/12
module load openmpi/4.1.5
set -u
# shellcheck source=/dev/null
source "$job_dir/env.sh"
finish() {
  local status=$?
  [ "$status" = 0 ] || echo "hpcnn: job $HPCNN_JOB_ID: FAILED with exit status $status (the lines above say where)" >&2
  mpirun -np 4 --map-by ppr:1:node --bind-to none --hostfile "$PBS_NODEFILE" bash "$job_dir/cleanup.sh" "$HPCNN_JOB_ID" || true
  return "$status"
}
trap finish EXIT
echo "hpcnn: job $HPCNN_JOB_ID: staging and checking 4 node(s)"
mpirun -np 4 --map-by ppr:1:node --bind-to none --hostfile "$PBS_NODEFILE" bash "$job_dir/stage.sh" "$HPCNN_JOB_ID"
echo "hpcnn: job $HPCNN_JOB_ID: training with 8 rank(s)"
mpirun -np 8 --map-by ppr:2:node:PE=18 --bind-to core --hostfile "$PBS_NODEFILE" bash "$job_dir/rank.sh" "$HPCNN_JOB_ID" > "$job_dir/out/summary.json.part"
mv "$job_dir/out/summary.json.part" "$job_dir/out/summary.json"
echo "hpcnn: job $HPCNN_JOB_ID: done: $job_dir/out/trained.onnx"
