#!/usr/bin/env bash
# Set-up from nothing on Debian 12 (bookworm): installs every Debian package the build,
# the tools and the tests need (with --main-job: those of the main job alone, no test
# packages), the Fashion-MNIST dataset package, and the pinned PyPI packages into a virtual
# environment of the project's own (.venv).
# Idempotent: a second run installs nothing new and takes seconds.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# What the main job needs (the build without its tests, the tools, the data set, the Python
# environment): `setup.sh --main-job` (scripts/quickstart.sh) installs these alone.
debs=(
  build-essential cmake pkg-config git ca-certificates
  libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers   # Debian's oneDNN CMake config requires OpenCL (only recommended by libdnnl-dev)
  libopenmpi-dev openmpi-bin
  zlib1g-dev libxxhash-dev
  libeigen3-dev                                      # sparsify-fcl: the eigendecompositions of its SVD initialisation
  libgoogle-perftools-dev                            # tcmalloc, the allocator of the training tools (tools/common/allocator.h)
  python3 python3-venv python3-dev time
  dataset-fashion-mnist
  help2man                                           # man pages from --help at build time
)
# And what the tests need besides (scripts/test.sh, CI).
test_debs=(
  catch2                                             # the unit tests
  libzstd-dev                                        # huffman_bench: huff0, zstd's Huffman coder, as the peer (its static library)
  clang libclang-rt-14-dev                           # the fuzzing test (libFuzzer)
  slurmctld slurmd slurm-client munge shellcheck     # the cluster tests: a one-host Slurm, the job scripts checked
  lmod man-db                                        # the install test loads the module with Lmod and reads the man pages
  iproute2 mount                                     # the two-host test bed (scripts/testbed: ip netns, veth, bridge, tc; umount of /run/netns)
)
[ "${1:-}" = --main-job ] || debs+=("${test_debs[@]}")

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  # The Slurm and munge packages would start their system services, which have no configuration
  # yet (the tests run their own daemons from a temporary folder): a policy-rc.d that answers
  # "not now" keeps them stopped during the installation, unless the machine already has one.
  policy=/usr/sbin/policy-rc.d
  own_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod 755 "$policy"
    own_policy=1
  fi
  status=0
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" || status=$?
  [ "$own_policy" = 0 ] || $sudo rm -f "$policy"
  [ "$status" = 0 ] || exit "$status"
fi

# Python: Debian's interpreter (the venv must not depend on whatever python3 is first on PATH).
py=/usr/bin/python3
venv="$here/.venv"
req="$here/scripts/requirements.txt"
want=$(sha256sum "$req" | cut -d' ' -f1)
# In CI (CI set; or HPCNN_VENV_CACHE=DIR) every run is a fresh clone: the environment is kept in a
# cache folder per requirements file and Python version, and .venv links to it, so that a run
# whose requirements did not change installs nothing (a changed requirements.txt makes a new one).
target=$venv
cache=${HPCNN_VENV_CACHE:-}
[ -z "${CI:-}" ] || cache=${cache:-${XDG_CACHE_HOME:-$HOME/.cache}/hpcnn}
if [ -n "$cache" ] && { [ ! -e "$venv" ] || [ -L "$venv" ]; }; then
  target="$cache/venv-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-${want:0:16}"
  mkdir -p "$cache"
  ln -sfn "$target" "$venv"
fi
stamp="$target/.requirements.sha256"
if [ ! -x "$target/bin/python" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: creating virtual environment $target" >&2
  "$py" -m venv "$target"
  "$target/bin/python" -m pip install -q --upgrade pip
  "$target/bin/python" -m pip install -q -r "$req"
  echo "$want" > "$stamp"
elif [ "$target" != "$venv" ]; then
  echo "setup: virtual environment from the cache: $target" >&2
fi
echo "setup: ok" >&2
