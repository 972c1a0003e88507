#!/bin/bash
#PJM -N fmnist-cnn
#PJM -L "node=16"
#PJM -L "rscgrp=small"
#PJM -L "elapse=01:00:00"
#PJM --mpi "max-proc-per-node=4"
#PJM -g hp000000
#PJM -j
#PJM -o @JOB@/out/job.%j.out
#PJM -S
#PJM -x PJM_LLIO_GFSCACHE=/vol0004
#PJM --llio localtmp-size=8Gi
# shellcheck disable=SC1090,SC1091  # the set-up lines source the cluster's own files
# hpcnn job 'fmnist-cnn' made by scripts/cluster/launch.py from fugaku.json and train.json.
# Submit from @JOB@: pjsub job.sh. Output: out/ (stage.log, envcheck.log, summary.json, trained.onnx).
set -eo pipefail  # -u after the set-up lines: module scripts read unset variables
export HPCNN_JOB_ID="${PJM_JOBID}"
job_dir=@JOB@
. /vol0004/apps/oss/spack/share/spack/setup-env.sh
set -u
# shellcheck source=/dev/null
source "$job_dir/env.sh"
llio_transfer "$job_dir/payload/bin/dist-train" "$job_dir/payload/bin/huffgpu-decode" "$job_dir/payload/data/train_images/img.idx.huf" "$job_dir/payload/data/train_labels/lbl.idx.huf" "$job_dir/payload/data/test_images/img.idx.huf" "$job_dir/payload/data/test_labels/lbl.idx.huf"
finish() {
  local status=$?
  [ "$status" = 0 ] || echo "hpcnn: job $HPCNN_JOB_ID: FAILED with exit status $status (the lines above say where)" >&2
  mpiexec -n 64 bash "$job_dir/cleanup.sh" "$HPCNN_JOB_ID" || true
  return "$status"
}
trap finish EXIT
echo "hpcnn: job $HPCNN_JOB_ID: staging and checking 16 node(s)"
mpiexec -n 64 bash "$job_dir/stage.sh" "$HPCNN_JOB_ID"
echo "hpcnn: job $HPCNN_JOB_ID: training with 64 rank(s)"
mpiexec -n 64 bash "$job_dir/rank.sh" "$HPCNN_JOB_ID" > "$job_dir/out/summary.json.part"
mv "$job_dir/out/summary.json.part" "$job_dir/out/summary.json"
llio_transfer --purge "$job_dir/payload/bin/dist-train" "$job_dir/payload/bin/huffgpu-decode" "$job_dir/payload/data/train_images/img.idx.huf" "$job_dir/payload/data/train_labels/lbl.idx.huf" "$job_dir/payload/data/test_images/img.idx.huf" "$job_dir/payload/data/test_labels/lbl.idx.huf"
echo "hpcnn: job $HPCNN_JOB_ID: done: $job_dir/out/trained.onnx"
