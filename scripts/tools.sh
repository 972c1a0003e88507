# Sourced by the scripts that run the hpcnn tools (pipeline.sh, the study and benchmark scripts; the
# Python programs use scripts/hpcnn_tools.py): where each tool is, and how it runs on N ranks.
#
#   hpcnn_tool NAME   prints the tool's path: with HPCNN_BIN set, HPCNN_BIN/NAME/NAME (a build
#                     tree's tools/) or HPCNN_BIN/NAME (an installed bin/); without it, this
#                     repository's build/tools/NAME/NAME when built, else NAME on PATH (tools
#                     installed by `cmake --install` and a loaded module). Exit 1 with a message
#                     saying where it looked when there is none.
#   hpcnn_launch N    sets the array HPCNN_LAUNCH to the prefix that runs a command on N ranks:
#                     empty for one rank, else ${MPIRUN:-mpirun} --oversubscribe -np N, plus
#                     --allow-run-as-root as root (the twin of launch() in scripts/hpcnn_tools.py;
#                     the tests use launch() in tests/cli/hpcnn_test.py).
# shellcheck shell=bash
hpcnn_launch() {
  HPCNN_LAUNCH=()
  [ "$1" -gt 1 ] || return 0
  HPCNN_LAUNCH=("${MPIRUN:-mpirun}" --oversubscribe -np "$1")
  [ "$(id -u)" -ne 0 ] || HPCNN_LAUNCH+=(--allow-run-as-root)
}
hpcnn_tool() {
  local name=$1 root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  if [ -n "${HPCNN_BIN:-}" ]; then
    for p in "$HPCNN_BIN/$name/$name" "$HPCNN_BIN/$name"; do
      [ -f "$p" ] && [ -x "$p" ] && { echo "$p"; return 0; }
    done
    echo "error: no $name in HPCNN_BIN=$HPCNN_BIN (neither $HPCNN_BIN/$name/$name nor $HPCNN_BIN/$name)" >&2
    return 1
  fi
  if [ -x "$root/build/tools/$name/$name" ]; then
    echo "$root/build/tools/$name/$name"
  elif command -v "$name" > /dev/null 2>&1; then
    command -v "$name"
  else
    echo "error: no $name: not built in $root/build/tools (bash scripts/build.sh) and not on PATH (cmake --install, module load hpcnn), HPCNN_BIN unset" >&2
    return 1
  fi
}
