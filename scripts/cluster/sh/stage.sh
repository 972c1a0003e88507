#!/usr/bin/env bash
# stage.sh JOB_ID: once per node, before training. The first process on a node copies the job's
# payload (huffgpu-compressed data, binaries, libraries: payload/manifest.tsv) from the shared
# folder to the node-local scratch folder, writes the node's dist-train configuration and runs
# envcheck.sh; processes that come later on the same node wait on the node-local lock and find the
# work done. Any failure exits non-zero with its reason, which fails the job before training.
set -euo pipefail
HPCNN_JOB_ID=${1:?usage: stage.sh JOB_ID}
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
manifest=$job_dir/payload/manifest.tsv

mkdir -p "$scratch" 2>/dev/null || fail "cannot create the scratch folder $scratch"
command -v flock >/dev/null || fail "flock (util-linux) is not installed"
exec 9>"$scratch/.stage.lock"
flock 9
if [ -f "$scratch/.staged" ] && cmp -s "$scratch/.staged" "$manifest"; then
  echo "hpcnn: node $node: already staged in $scratch"
  exit 0
fi

free_kib=$(df -Pk "$scratch" | awk 'NR == 2 {print $4}')
[ "$((free_kib * 1024))" -ge "$HPCNN_PAYLOAD_BYTES" ] ||
  fail "the scratch folder $scratch has $((free_kib * 1024)) bytes free; the payload needs $HPCNN_PAYLOAD_BYTES"

start=$(date +%s%N)
files=0
bytes=0
while IFS=$'\t' read -r size rel; do
  src=$job_dir/payload/$rel
  dst=$scratch/$rel
  [ -r "$src" ] || fail "payload file $src is missing or unreadable"
  mkdir -p "$(dirname "$dst")"
  cp "$src" "$dst.part" || fail "cannot copy $src to $dst"
  mv "$dst.part" "$dst"
  got=$(stat -c %s "$dst")
  [ "$got" = "$size" ] || fail "$dst has $got bytes after the copy; the manifest says $size"
  files=$((files + 1))
  bytes=$((bytes + size))
done < "$manifest"

config=$(< "$job_dir/train.json.in")
printf '%s\n' "${config//@SCRATCH@/"$scratch"}" > "$scratch/train.json"
ms=$((($(date +%s%N) - start) / 1000000))
echo "$node staged $files files, $bytes bytes, in $ms ms to $scratch" >> "$job_dir/out/stage.log"
echo "hpcnn: node $node: staged $files files ($bytes bytes) in $ms ms to $scratch"

bash "$job_dir/envcheck.sh" "$HPCNN_JOB_ID"
cp "$manifest" "$scratch/.staged"
