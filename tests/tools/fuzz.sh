#!/usr/bin/env bash
# Builds the libFuzzer targets of the huffgpu decoder and round trip (fuzz/CMakeLists.txt: a
# codec-only CMake build with clang, AddressSanitizer + UndefinedBehaviorSanitizer, linking the
# codec's own library target) and runs each for SECONDS (default 60).
# usage: tests/tools/fuzz.sh [SECONDS] [BUILD_DIR]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
secs="${1:-60}"
out="${2:-$here/build/fuzz}"
mkdir -p "$out"
cxx=$(command -v clang++ || command -v clang++-14)
san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"
cmake -S "$here" -B "$out/build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" -DCMAKE_CXX_FLAGS="$san -Wno-unknown-pragmas" \
  -DHPCNN_CODEC_ONLY=ON -DHPCNN_FUZZ=ON -DHPCNN_DEPS_DIR= -DHPCNN_WITH_CUDA=OFF -DHPCNN_WITH_MPI=OFF \
  -DHPCNN_BUILD_TESTS=OFF > "$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
cmake --build "$out/build" -j"$(nproc)" --target huffman_decode_fuzzer huffman_roundtrip_fuzzer > "$out/build.log" 2>&1 \
  || { tail -40 "$out/build.log"; exit 1; }
# Seed corpus for the decoder: valid streams of the committed test files.
mkdir -p "$out/corpus_decode" "$out/corpus_roundtrip"
enc="$here/build/tools/huffgpu-encode/huffgpu-encode"
if [ -x "$enc" ]; then
  head -c 3000 "$here/tests/data/alice29.txt" | "$enc" -c --chunk-size 1K > "$out/corpus_decode/alice.huf"
  head -c 2000 "$here/tests/data/kppkn.gtb" | "$enc" -c --no-gap-array --segment-bits 128 > "$out/corpus_decode/kppkn.huf"
fi
head -c 4000 "$here/tests/data/html" > "$out/corpus_roundtrip/html"
export ASAN_OPTIONS=detect_leaks=1
"$out/build/fuzz/huffman_decode_fuzzer" -max_total_time="$secs" -timeout=10 -max_len=65536 -print_final_stats=1 "$out/corpus_decode" 2>&1 | tail -4
"$out/build/fuzz/huffman_roundtrip_fuzzer" -max_total_time="$secs" -timeout=10 -max_len=65536 -print_final_stats=1 "$out/corpus_roundtrip" 2>&1 | tail -4
echo "fuzz: both targets ran ${secs}s without a finding"
