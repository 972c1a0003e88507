#!/usr/bin/env bash
# In-process A/B of the huffgpu CPU encoder and decoder: lib/huffman/cpu/encoder.cpp (with
# quad_pack.cpp where REV has it), decoder.cpp and lib/huffman/codebook.cpp (code construction
# and decode tables, as the decoder of REV calls them; the encoder's code lengths come through
# today's chunk_plan.cpp on both sides) at git revision REV (A) against
# the working tree's (B), each compiled with its entry points renamed and linked into
# bench/huffman_ab.cpp with the rest of today's library (so changes elsewhere, e.g. in
# block_split.cpp or chunk_plan.cpp, are in both), timed in alternating pairs in one process:
# one thread, in memory, same bytes checked. REV's files must compile against today's headers.
# usage: bench/ab_huffman.sh REV [PAIRS] [FILE...]
#   defaults: PAIRS 16; files: the corpus concatenated in name order, bible.txt, Fashion-MNIST's
#   training images. Run scripts/setup.sh and scripts/build.sh first (BUILD_DIR: another build).
#   HUFFMAN_AB_NO_GAP_ARRAY=1: streams without gap arrays. KEEP_AB=PATH: keep the program there
#   (to profile it: perf record PATH enc 20 FILE). Exit 1 when A and B write different bytes
#   or a decoder returns other bytes; 2 for a bad revision, PAIRS or file (missing or empty).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="${BUILD_DIR:-$here/build}"
rev=${1:?usage: bench/ab_huffman.sh REV [PAIRS] [FILE...]}
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
cxx=(g++ -std=c++20 -O3 -DNDEBUG -fopenmp -I"$here/lib" -w)  # the Release build's flags
# Each side's files, its entry points renamed (_A, _B): encoder.cpp, decoder.cpp, codebook.cpp
# and, where the revision has it, quad_pack.cpp (AVX-512 packing).
renames() {
  for f in encode_chunk decode_chunk byte_histogram pack_quads make_quad_tables quad_pack_available set_quad_pack_enabled \
    canonical_codes code_table_size write_code_table read_code_table build_decode_table limited_code_lengths; do echo "-D$f=${f}_$1"; done
}
objs=()
side() {  # side A|B REV|"" : compiles that side's files (REV empty: the working tree)
  local ren obj
  mapfile -t ren < <(renames "$1")
  for f in lib/huffman/cpu/encoder.cpp lib/huffman/cpu/decoder.cpp lib/huffman/codebook.cpp lib/huffman/cpu/quad_pack.cpp; do
    obj="$tmp/$1_$(basename "$f" .cpp)"
    if [ -n "$2" ]; then
      git -C "$here" show "$2:$f" > "$obj.cpp" 2> /dev/null || continue  # quad_pack.cpp: not in older revisions
    else
      [ -f "$here/$f" ] || continue
      cp "$here/$f" "$obj.cpp"
    fi
    "${cxx[@]}" "${ren[@]}" -c "$obj.cpp" -o "$obj.o"
    objs+=("$obj.o")
  done
}
side A "$rev"
side B ""
"${cxx[@]}" "$here/bench/huffman_ab.cpp" "${objs[@]}" "$build/lib/huffman/libhpcnn_huffman.a" "$build/lib/core/libhpcnn_core.a" -lxxhash \
  -o "$tmp/huffman_ab"
echo "== A: $rev, B: the working tree; $pairs alternating pairs per file, one thread, in memory"
"$tmp/huffman_ab" enc "$pairs" "${files[@]}"
"$tmp/huffman_ab" dec "$pairs" "${files[@]}"
