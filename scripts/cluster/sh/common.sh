# shellcheck shell=bash disable=SC2034  # bin and scratch: for the scripts that source this file
# Sourced by stage.sh, envcheck.sh and rank.sh (copied into the job folder by
# scripts/cluster/launch.py): the job's settings (env.sh), this node's name and its scratch folder.
# HPCNN_JOB_ID must be set by the caller.
job_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=/dev/null
source "$job_dir/env.sh"
# The node's name: HPCNN_NODE (tests), Slurm's node name (several slurmd may share a host), the host.
node=${HPCNN_NODE:-${SLURMD_NODENAME:-$(hostname -s)}}

fail() {
  echo "hpcnn: node $node: error: $*" >&2
  exit 1
}

# The node-local scratch folder: HPCNN_SCRATCH_PATTERN with ${VAR} from this node's environment,
# %n the node name, %j the job id, %u the user.
scratch_folder() {
  local s=$HPCNN_SCRATCH_PATTERN var
  while [[ $s =~ \$\{([A-Za-z_][A-Za-z0-9_]*)\} ]]; do
    var=${BASH_REMATCH[1]}
    [ -n "${!var:-}" ] || fail "the scratch path '$HPCNN_SCRATCH_PATTERN' uses \${$var}, which is not set on this node"
    s=${s//"\${$var}"/"${!var}"}
  done
  # Quoted replacements: bash 5.2 gives & in an unquoted one the matched text.
  s=${s//%n/"$node"}
  s=${s//%j/"$HPCNN_JOB_ID"}
  s=${s//%u/"${USER:-$(id -un)}"}
  case $s in
    /*) ;;
    *) fail "the scratch path '$s' is not absolute" ;;
  esac
  case $s in
    *\"* | *\\*) fail "the scratch path '$s' contains a quote or a backslash" ;;
  esac
  printf '%s' "$s"
}
scratch=$(scratch_folder)

# Where this node's binaries are: staged, or the shared folder they were built in.
if [ "$HPCNN_STAGED_BINARIES" = 1 ]; then
  bin=$scratch/bin
else
  bin=$HPCNN_BIN_DIR
fi
if [ "$HPCNN_STAGED_LIBRARIES" = 1 ]; then
  export LD_LIBRARY_PATH=$scratch/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
