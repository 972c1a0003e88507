#!/usr/bin/env bash
# Downloads the Debian packages of the codec's header-only dependencies and unpacks them into
# .deps/ (git-ignored), for the codec-only build on a machine without them and without network
# (scripts/gpu-check.sh; name .deps in the device tool's `carry`). Needs apt-get here.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps="$here/.deps"
mkdir -p "$deps/debs" "$deps/root"
cd "$deps/debs"
apt-get download libcli11-dev libspdlog-dev libfmt-dev nlohmann-json3-dev libxxhash-dev catch2 >&2
for f in *.deb; do dpkg -x "$f" "$deps/root"; done
rm -rf "$deps/root/usr/share" "$deps/root/usr/lib"
echo "fetch-gpu-deps: headers in $deps/root/usr/include ($(du -sh "$deps/root" | cut -f1))" >&2
