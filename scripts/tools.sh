# Sourced by the scripts that run the hpcnn tools (pipeline.sh, the study scripts; the Python programs use scripts/hpcnn_tools.py): where each tool is.
#
#   hpcnn_tool NAME   prints the tool's path: with HPCNN_BIN set, HPCNN_BIN/NAME/NAME (a build
#                     tree's tools/) or HPCNN_BIN/NAME (an installed bin/); without it, this
#                     repository's build/tools/NAME/NAME when built, else NAME on PATH (tools
#                     installed by `cmake --install` and a loaded module). Exit 1 with a message
#                     saying where it looked when there is none.
# shellcheck shell=bash
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
