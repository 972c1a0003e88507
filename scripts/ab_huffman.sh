#!/usr/bin/env bash
# In-process A/B of the huffgpu CPU encoder and decoder: lib/huffman/cpu/encoder.cpp (with
# quad_pack.cpp where REV has it) and decoder.cpp at git revision REV (A) against the working
# tree's (B), each compiled with its entry
# points renamed and linked into bench/huffman_ab.cpp with the rest of today's library (so changes
# elsewhere, e.g. in block_split.cpp, are in both), timed in alternating pairs in one process:
# one thread, in memory, same bytes checked. REV's two files must compile against today's headers.
# usage: scripts/ab_huffman.sh REV [PAIRS] [FILE...]
#   defaults: PAIRS 16; files: the corpus concatenated in name order, bible.txt, Fashion-MNIST's
#   training images. Run scripts/setup.sh and scripts/build.sh first (BUILD_DIR: another build).
#   HUFFMAN_AB_NO_GAP_ARRAY=1: streams without gap arrays. KEEP_AB=PATH: keep the program there
#   (to profile it: perf record PATH enc 20 FILE). Exit 1 when A and B write different bytes
#   or a decoder returns other bytes; 2 for a bad revision, PAIRS or file (missing or empty).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${BUILD_DIR:-$here/build}"
rev=${1:?usage: scripts/ab_huffman.sh REV [PAIRS] [FILE...]}
pairs=${2:-16}
[[ $pairs =~ ^[1-9][0-9]*$ ]] || { echo "ab_huffman.sh: PAIRS is '$pairs': a positive integer" >&2; exit 2; }
git -C "$here" rev-parse -q --verify "$rev^{commit}" > /dev/null || { echo "ab_huffman.sh: '$rev' is no revision of this repository" >&2; exit 2; }
shift $(( $# >= 2 ? 2 : 1 ))
tmp=$(mktemp -d)
trap '[ -n "${KEEP_AB:-}" ] && cp "$tmp/huffman_ab" "$KEEP_AB"; rm -rf "$tmp"' EXIT
files=("$@")
if [ ${#files[@]} -eq 0 ]; then
  corpus="${CORPUS:-$here/../shared/corpus}"
  [ -d "$corpus" ] || corpus="$here/tests/data"
  parts=()
  for f in "$corpus"/*; do case "$f" in *.md) ;; *) [ -f "$f" ] && parts+=("$f") ;; esac; done
  cat "${parts[@]}" > "$tmp/concat.bin"
  files=("$tmp/concat.bin")
  [ -f "$corpus/bible.txt" ] && files+=("$corpus/bible.txt")
  fm=/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
  [ -f "$fm" ] && gzip -dc "$fm" > "$tmp/fashion-mnist-train-images" && files+=("$tmp/fashion-mnist-train-images")
fi
for lib in "$build/lib/huffman/libhpcnn_huffman.a" "$build/lib/core/libhpcnn_core.a"; do
  [ -f "$lib" ] || { echo "ab_huffman.sh: $lib missing: run scripts/build.sh first" >&2; exit 2; }
done
git -C "$here" show "$rev:lib/huffman/cpu/encoder.cpp" > "$tmp/encoder_a.cpp"
git -C "$here" show "$rev:lib/huffman/cpu/decoder.cpp" > "$tmp/decoder_a.cpp"
cxx=(g++ -std=c++20 -O3 -DNDEBUG -fopenmp -I"$here/lib" -w)  # the Release build's flags
# The encoder side: encoder.cpp and, where the revision has it, quad_pack.cpp (AVX-512 packing).
renames() { for f in encode_chunk byte_histogram pack_quads make_quad_tables quad_pack_available set_quad_pack_enabled; do echo "-D$f=${f}_$1"; done; }
mapfile -t ren_a < <(renames A)
mapfile -t ren_b < <(renames B)
objs=("$tmp/ea.o" "$tmp/da.o" "$tmp/eb.o" "$tmp/db.o")
"${cxx[@]}" "${ren_a[@]}" -c "$tmp/encoder_a.cpp" -o "$tmp/ea.o"
"${cxx[@]}" -Ddecode_chunk=decode_chunk_A -c "$tmp/decoder_a.cpp" -o "$tmp/da.o"
"${cxx[@]}" "${ren_b[@]}" -c "$here/lib/huffman/cpu/encoder.cpp" -o "$tmp/eb.o"
"${cxx[@]}" -Ddecode_chunk=decode_chunk_B -c "$here/lib/huffman/cpu/decoder.cpp" -o "$tmp/db.o"
if git -C "$here" show "$rev:lib/huffman/cpu/quad_pack.cpp" > "$tmp/quad_pack_a.cpp" 2> /dev/null; then
  "${cxx[@]}" "${ren_a[@]}" -c "$tmp/quad_pack_a.cpp" -o "$tmp/qa.o"
  objs+=("$tmp/qa.o")
fi
if [ -f "$here/lib/huffman/cpu/quad_pack.cpp" ]; then
  "${cxx[@]}" "${ren_b[@]}" -c "$here/lib/huffman/cpu/quad_pack.cpp" -o "$tmp/qb.o"
  objs+=("$tmp/qb.o")
fi
"${cxx[@]}" "$here/bench/huffman_ab.cpp" "${objs[@]}" "$build/lib/huffman/libhpcnn_huffman.a" "$build/lib/core/libhpcnn_core.a" -lxxhash \
  -o "$tmp/huffman_ab"
echo "== A: $rev, B: the working tree; $pairs alternating pairs per file, one thread, in memory"
"$tmp/huffman_ab" enc "$pairs" "${files[@]}"
"$tmp/huffman_ab" dec "$pairs" "${files[@]}"
