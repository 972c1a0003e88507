#!/usr/bin/env bash
# rank.sh JOB_ID [dist-train flags...]: one training rank, started by the MPI launcher in job.sh.
# Runs the node's staged dist-train on the node's staged configuration, with one GPU per local
# rank when the node has GPUs (CUDA_VISIBLE_DEVICES = the launcher's local rank).
set -euo pipefail
HPCNN_JOB_ID=${1:?usage: rank.sh JOB_ID [dist-train flags...]}
shift
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ -f "$scratch/.staged" ] || fail "this node was not staged (no $scratch/.staged): stage.sh must run on every node first"
local_rank=${OMPI_COMM_WORLD_LOCAL_RANK:-${MPI_LOCALRANKID:-${PMI_LOCAL_RANK:-${PLX_LOCAL_RANK:-${SLURM_LOCALID:-0}}}}}
if [ "$HPCNN_GPUS_PER_NODE" -gt 0 ]; then
  export CUDA_VISIBLE_DEVICES=$local_rank
fi
export OMP_NUM_THREADS=$HPCNN_THREADS_PER_RANK
exec "$bin/dist-train" --config "$scratch/train.json" "$@"
