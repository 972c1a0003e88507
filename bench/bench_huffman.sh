#!/usr/bin/env bash
# Benchmark of the huffgpu CPU codec against zlib's Huffman-only mode and huff0 (zstd's Huffman
# coder), in memory, in the same run: on ../shared/corpus file by file (when present, else the
# committed test files), on the corpus concatenated in name order into one file (unlike data in
# one stream: what code blocks are for), and on the Fashion-MNIST training images; then the
# command-line tools, whole process to a pipe, one thread, on the concatenated file x4 against
# huff0's in-memory speed on the same bytes. Per-file sizes are compared with
# bench/huffman_v1_sizes.tsv (the format-1 encoder of commit 0a74df2).
# Run scripts/setup.sh and scripts/build.sh first (BUILD_DIR: another build folder). Prints the
# tables and checks the goals. REPEAT: rounds per table (5); RUNS: runs of each tool (15).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${BUILD_DIR:-$here/build}"
corpus="${CORPUS:-$here/../shared/corpus}"
[ -d "$corpus" ] || corpus="$here/tests/data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
for f in "$corpus"/*; do
  case "$f" in *.md) continue ;; esac
  [ -f "$f" ] && files+=("$f")
done
bench="$build/bench/huffman_bench"
echo "== corpus, file by file: $corpus"
"$bench" --repeat "${REPEAT:-5}" --reference "$here/bench/huffman_v1_sizes.tsv" "${files[@]}"
cat "${files[@]}" > "$tmp/concat.bin"
echo
echo "== the corpus concatenated in name order ($(stat -c %s "$tmp/concat.bin") bytes)"
"$bench" --repeat "${REPEAT:-5}" --reference "$here/bench/huffman_v1_sizes.tsv" "$tmp/concat.bin"
fm=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
if [ -f "$fm" ]; then
  gzip -dc "$fm" > "$tmp/fashion-mnist-train-images"
  echo
  echo "== Fashion-MNIST training images (47 MB)"
  "$bench" --repeat "${REPEAT:-3}" "$tmp/fashion-mnist-train-images"
fi

echo
for _ in 1 2 3 4; do cat "$tmp/concat.bin"; done > "$tmp/concat4.bin"
size=$(stat -c %s "$tmp/concat4.bin")
echo "== command-line tools, one thread, whole process to a pipe, on the concatenated file x4 ($size bytes), median of ${RUNS:-15} runs"
enc="$build/tools/huffgpu-encode/huffgpu-encode"
dec="$build/tools/huffgpu-decode/huffgpu-decode"
"$enc" -T 1 -c "$tmp/concat4.bin" > "$tmp/concat4.huf"
median_s() {  # median wall seconds of RUNS runs of "$@" (a shell command line, run by this shell:
  # no extra bash start or date process inside the interval, clock from $EPOCHREALTIME)
  local LC_ALL=C  # a decimal point in $EPOCHREALTIME
  for _ in $(seq "${RUNS:-15}"); do
    local t0 t1
    t0=$EPOCHREALTIME
    eval "$*"
    t1=$EPOCHREALTIME
    echo "$t0 $t1"
  done | awk '{print $2 - $1}' | sort -g | awk '{a[NR]=$1} END {m = NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2; printf "%.4f\n", m}'
}
enc_s=$(median_s "'$enc' -T 1 -c '$tmp/concat4.bin' | cat > /dev/null")
dec_s=$(median_s "'$dec' -T 1 -c '$tmp/concat4.huf' | cat > /dev/null")
peer=$("$bench" --repeat "${REPEAT:-5}" "$tmp/concat4.bin" | awk '$1 == "concat4.bin" {print $(NF-1), $NF}')
read -r henc hdec <<< "$peer"
awk -v n="$size" -v es="$enc_s" -v ds="$dec_s" -v he="$henc" -v hd="$hdec" 'BEGIN {
  e = n / es / 1e6; d = n / ds / 1e6
  printf "huffgpu-encode -T 1 -c: %.0f MB/s (%.3f s), huffgpu-decode -T 1 -c: %.0f MB/s (%.3f s); huff0 in memory: encode %.0f, decode %.0f MB/s\n", e, es, d, ds, he, hd
  printf "tools vs huff0 in memory: encode %.2fx (goal >= 0.85: %s), decode %.2fx (goal >= 0.85: %s)\n", e / he, (e / he >= 0.85 ? "met" : "NOT met"), d / hd, (d / hd >= 0.85 ? "met" : "NOT met")
}'
