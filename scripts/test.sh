#!/usr/bin/env bash
# Sets everything up from nothing, builds, and runs every test (ctest). .ci/run runs this.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$here/scripts/setup.sh"
bash "$here/scripts/build.sh"
cd "${HPCNN_BUILD_DIR:-$here/build}"
ctest --output-on-failure -j2 --timeout 1500
