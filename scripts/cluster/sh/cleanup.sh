#!/usr/bin/env bash
# cleanup.sh JOB_ID: when the job ends, after training or a failure (stage.cleanup; job.sh's EXIT
# trap), removes what stage.sh put in this node's scratch folder: the manifest's files (a part
# copy too), train.json and the stage markers, then the folders left empty. Nothing else: a
# scratch path such as /tmp is never emptied.
set -euo pipefail
HPCNN_JOB_ID=${1:?usage: cleanup.sh JOB_ID}
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
[ -d "$scratch" ] || exit 0  # nothing staged here, or another process of this node cleaned up already
while IFS=$'\t' read -r _ rel; do
  rm -f -- "${scratch:?}/$rel" "${scratch:?}/$rel.part"
  dir=$(dirname "$rel")
  while [ "$dir" != . ]; do
    rmdir -- "$scratch/$dir" 2>/dev/null || break
    dir=$(dirname "$dir")
  done
done < "$job_dir/payload/manifest.tsv"
rm -f -- "$scratch/train.json" "$scratch/.staged" "$scratch/.stage.lock"
rmdir -- "$scratch" 2>/dev/null || true
echo "hpcnn: node $node: cleaned up $scratch"
