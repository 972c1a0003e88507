#!/usr/bin/env bash
# Builds the libFuzzer targets of the huffgpu decoder and round trip with clang
# (AddressSanitizer + UndefinedBehaviorSanitizer) and runs each for SECONDS (default 60).
# usage: scripts/fuzz.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
secs="${1:-60}"
out="${2:-$here/build/fuzz}"
mkdir -p "$out"
cxx=$(command -v clang++ || command -v clang++-14)
srcs=("$here"/lib/core/error.cpp "$here"/lib/huffman/format.cpp "$here"/lib/huffman/codebook.cpp "$here"/lib/huffman/chunk_plan.cpp
      "$here"/lib/huffman/cpu/encoder.cpp "$here"/lib/huffman/cpu/decoder.cpp "$here"/lib/huffman/cpu/stream.cpp)
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -Wno-unknown-pragmas
       -I"$here/lib")  # xxh_x86dispatch.h maps XXH3 to libxxhash's dispatching entry points
for target in huffman_decode_fuzzer huffman_roundtrip_fuzzer; do
  if [ ! -x "$out/$target" ] || [ -n "$(find "$here/lib/huffman" "$here/fuzz" -newer "$out/$target" -name '*.[ch]*' | head -1)" ]; then
    "$cxx" "${flags[@]}" "$here/fuzz/$target.cpp" "${srcs[@]}" -lxxhash -o "$out/$target"
  fi
done
# Seed corpus for the decoder: valid streams of the committed test files.
mkdir -p "$out/corpus_decode" "$out/corpus_roundtrip"
enc="$here/build/tools/huffgpu-encode/huffgpu-encode"
if [ -x "$enc" ]; then
  head -c 3000 "$here/tests/data/alice29.txt" | "$enc" -c --chunk-size 1K > "$out/corpus_decode/alice.huf"
  head -c 2000 "$here/tests/data/kppkn.gtb" | "$enc" -c --no-gap-array --segment-bits 128 > "$out/corpus_decode/kppkn.huf"
fi
head -c 4000 "$here/tests/data/html" > "$out/corpus_roundtrip/html"
export ASAN_OPTIONS=detect_leaks=1
"$out/huffman_decode_fuzzer" -max_total_time="$secs" -timeout=10 -max_len=65536 -print_final_stats=1 "$out/corpus_decode" 2>&1 | tail -4
"$out/huffman_roundtrip_fuzzer" -max_total_time="$secs" -timeout=10 -max_len=65536 -print_final_stats=1 "$out/corpus_roundtrip" 2>&1 | tail -4
echo "fuzz: both targets ran ${secs}s without a finding"
