#!/usr/bin/env bash
# Sets everything up from nothing, builds (warnings are errors here, hence in CI), and runs
# every test (ctest). .ci/run runs this. Prints the time of each part at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$SECONDS
bash "$here/scripts/setup.sh"
t1=$SECONDS
bash "$here/scripts/build.sh" -DHPCNN_WERROR=ON
t2=$SECONDS
cd "${HPCNN_BUILD_DIR:-$here/build}"
rc=0
ctest --output-on-failure -j2 --timeout 1500 || rc=$?
echo "test.sh: set-up $((t1 - t0)) s, build $((t2 - t1)) s, tests $((SECONDS - t2)) s" >&2
exit $rc
