#!/usr/bin/env bash
# Sets everything up from nothing, builds (warnings are errors here, hence in CI), and runs
# every test (ctest). .ci/run runs this. In CI (CI set) or with HPCNN_SANITIZE=1 it then runs
# tests/tools/sanitize.sh too (AddressSanitizer + UBSan build, ctest -L unit: about 7 more minutes
# on 2 cores). Prints the time of each part at the end.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
t0=$SECONDS
bash "$here/scripts/setup.sh"
t1=$SECONDS
bash "$here/scripts/build.sh" -DHPCNN_WERROR=ON -DHPCNN_BUILD_TESTS=ON  # ON: a quickstart before left it OFF in the cache
t2=$SECONDS
rc=0
(cd "${HPCNN_BUILD_DIR:-$here/build}" && ctest --output-on-failure -j2 --timeout 1500) || rc=$?
t3=$SECONDS
times="set-up $((t1 - t0)) s, build $((t2 - t1)) s, tests $((t3 - t2)) s"
if [ -n "${CI:-}" ] || [ "${HPCNN_SANITIZE:-0}" = 1 ]; then
  bash "$here/tests/tools/sanitize.sh" || rc=$?
  times="$times, sanitizers $((SECONDS - t3)) s"
fi
echo "test.sh: $times" >&2
exit $rc
