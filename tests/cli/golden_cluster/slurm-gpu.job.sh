#!/bin/bash
#SBATCH --job-name=fmnist-resnet
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --gpus-per-node=4
#SBATCH --time=02:00:00
#SBATCH --partition=gpu
#SBATCH --account=myproject
#SBATCH --output=@JOB@/out/job.%j.out
# shellcheck disable=SC1090,SC1091  # the set-up lines source the cluster's own files
# hpcnn job 'fmnist-resnet' made by scripts/cluster/launch.py from slurm-gpu.json and train.json.
# Submit from @JOB@: sbatch --parsable job.sh. Output: out/ (stage.log, envcheck.log, summary.json, trained.onnx).
set -eo pipefail  # -u after the set-up lines: module scripts read unset variables
export HPCNN_JOB_ID="${SLURM_JOB_ID}"
job_dir=@JOB@
module load openmpi/4.1
module load cuda/12.4
module load nccl/2.21
set -u
# shellcheck source=/dev/null
source "$job_dir/env.sh"
finish() {
  local status=$?
  [ "$status" = 0 ] || echo "hpcnn: job $HPCNN_JOB_ID: FAILED with exit status $status (the lines above say where)" >&2
  srun --nodes=2 --ntasks=2 --ntasks-per-node=1 bash "$job_dir/cleanup.sh" "$HPCNN_JOB_ID" || true
  return "$status"
}
trap finish EXIT
echo "hpcnn: job $HPCNN_JOB_ID: staging and checking 2 node(s)"
srun --nodes=2 --ntasks=2 --ntasks-per-node=1 bash "$job_dir/stage.sh" "$HPCNN_JOB_ID"
echo "hpcnn: job $HPCNN_JOB_ID: training with 8 rank(s)"
mpirun -np 8 --map-by ppr:4:node:PE=8 --bind-to core bash "$job_dir/rank.sh" "$HPCNN_JOB_ID" > "$job_dir/out/summary.json.part"
mv "$job_dir/out/summary.json.part" "$job_dir/out/summary.json"
echo "hpcnn: job $HPCNN_JOB_ID: done: $job_dir/out/trained.onnx"
