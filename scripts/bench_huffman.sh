#!/usr/bin/env bash
# Benchmark of the huffgpu CPU codec against zlib's Huffman-only mode, on ../shared/corpus (when
# present, else the committed test files) and the Fashion-MNIST training images.
# Run scripts/setup.sh and scripts/build.sh first (BUILD_DIR: another build folder). Prints a table
# and checks the goals.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
corpus="${CORPUS:-$here/../shared/corpus}"
[ -d "$corpus" ] || corpus="$here/tests/data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
for f in "$corpus"/*; do
  case "$f" in *.md) continue ;; esac
  [ -f "$f" ] && files+=("$f")
done
echo "== corpus: $corpus"
"${BUILD_DIR:-$here/build}/bench/huffman_bench" --repeat "${REPEAT:-5}" "${files[@]}"
fm=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
if [ -f "$fm" ]; then
  gzip -dc "$fm" > "$tmp/fashion-mnist-train-images"
  echo
  echo "== Fashion-MNIST training images (47 MB)"
  "${BUILD_DIR:-$here/build}/bench/huffman_bench" --repeat "${REPEAT:-3}" "$tmp/fashion-mnist-train-images"
fi
