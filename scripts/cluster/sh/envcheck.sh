#!/usr/bin/env bash
# envcheck.sh JOB_ID: the environment check of one node, run by stage.sh after staging. Fails
# (non-zero, the reason on stderr and so in the job's output) unless: ranks x threads fit the
# node's online cores; dist-train and huffgpu-decode start and every shared library they need
# resolves (ldd); the MPI launcher runs (and reports mpi.version when set); with GPUs, nvidia-smi
# sees gpus_per_node of them and the CUDA runtime and NCCL that dist-train loads have the
# configured versions; every staged data file has its manifest size and decodes (huffgpu-decode -t).
set -euo pipefail
HPCNN_JOB_ID=${1:?usage: envcheck.sh JOB_ID}
# shellcheck source=common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
ok() { echo "hpcnn: node $node: ok: $*"; }

cores=$(getconf _NPROCESSORS_ONLN)
need=$((HPCNN_RANKS_PER_NODE * HPCNN_THREADS_PER_RANK))
[ "$need" -le "$cores" ] ||
  fail "ranks x threads = $HPCNN_RANKS_PER_NODE x $HPCNN_THREADS_PER_RANK = $need exceeds the $cores cores online on this node"
ok "$need of $cores cores"

for tool in dist-train huffgpu-decode; do
  exe=$bin/$tool
  [ -x "$exe" ] || fail "$exe is missing or not executable"
  missing=$(ldd "$exe" 2>&1 | awk '/not found/ {print $1}' | tr '\n' ' ')
  [ -z "$missing" ] || fail "$exe: shared libraries not found on this node: $missing(see scripts/cluster/README.md: libraries on the nodes)"
  version=$("$exe" --version 2>&1) || fail "$exe does not start: $version"
  ok "$tool starts: $version"
done

mpi=$("$HPCNN_MPI_LAUNCHER" --version 2>&1 | grep -m1 -v '^\s*$') || fail "the MPI launcher '$HPCNN_MPI_LAUNCHER' does not run"
if [ -n "$HPCNN_MPI_VERSION" ] && [[ $mpi != *"$HPCNN_MPI_VERSION"* ]]; then
  fail "MPI is '$mpi'; the cluster description expects '$HPCNN_MPI_VERSION'"
fi
ok "MPI: $mpi"

# The version in a library's file name as dist-train loads it (libnccl.so.2 -> libnccl.so.2.21.5).
loaded_version() {
  local path
  path=$(ldd "$bin/dist-train" | awk -v lib="$1" '$1 ~ "^"lib {print $3; exit}')
  [ -n "$path" ] || return 0
  path=$(readlink -f "$path")
  path=${path##*/}
  printf '%s' "${path#*.so.}"
}
if [ "$HPCNN_GPUS_PER_NODE" -gt 0 ]; then
  command -v nvidia-smi >/dev/null || fail "gpus_per_node is $HPCNN_GPUS_PER_NODE but nvidia-smi is not on this node"
  gpus=$(nvidia-smi -L | grep -c '^GPU') || true
  [ "$gpus" -ge "$HPCNN_GPUS_PER_NODE" ] || fail "nvidia-smi sees $gpus GPUs; gpus_per_node is $HPCNN_GPUS_PER_NODE"
  ok "$gpus GPUs"
  for pair in "libcudart:$HPCNN_CUDA_VERSION" "libnccl:$HPCNN_NCCL_VERSION"; do
    lib=${pair%%:*}
    want=${pair#*:}
    [ -n "$want" ] || continue
    got=$(loaded_version "$lib")
    [ -n "$got" ] || fail "dist-train does not load $lib (expected version $want): a build without CUDA?"
    [[ $got == "$want"* ]] || fail "dist-train loads $lib $got; the cluster description expects $want"
    ok "$lib $got"
  done
fi

while IFS=$'\t' read -r size rel; do
  case $rel in data/*) ;; *) continue ;; esac
  file=$scratch/$rel
  [ -r "$file" ] || fail "data file $file is missing or unreadable"
  [ "$(stat -c %s "$file")" = "$size" ] || fail "data file $file does not have the $size bytes of the payload"
  case $file in
    *.huf) "$bin/huffgpu-decode" -q -t -T "$HPCNN_THREADS_PER_RANK" "$file" || fail "data file $file does not decode" ;;
  esac
  ok "data $rel ($size bytes)"
done < "$job_dir/payload/manifest.tsv"
echo "$node ok" >> "$job_dir/out/envcheck.log"
