// hpcnn data: reading a data file into memory and undoing its compression (gzip, huffgpu).
//
// A file is recognised by its first bytes, never by its name: gzip by 1f 8b (RFC 1952; several
// concatenated members are one stream, as gzip -d reads them), huffgpu by the container magic
// "HUFG" (huffman/FORMAT.md; decoded with the CPU codec, huffman/stream.h). Layers are undone
// until the bytes are neither: a huffgpu-encoded .idx.gz is decoded, then gunzipped. A huffgpu
// stream inside gzip is not supported. Decompressed data always lives in memory: there is no
// random access into compressed files (data/source.h streams only uncompressed files).
//
// Errors name the file and the byte offset (offsets into the compressed bytes for gzip,
// the huffgpu codec's chunk and offset for huffgpu):
//   ErrorKind::io          the file cannot be opened or read;
//   ErrorKind::bad_input   corrupt or truncated gzip / huffgpu data, bytes after the gzip stream;
//   ErrorKind::unsupported a huffgpu stream inside a gzip stream.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hpcnn::data {

enum class Compression : uint8_t { none, gzip, huffgpu };

// Compression recognised from the first `n` bytes at `p` (none when n is too short).
Compression detect_compression(const uint8_t* p, size_t n);
const char* compression_name(Compression c);  // "none", "gzip", "huffgpu"

struct FileBytes {
  std::vector<uint8_t> bytes;       // the file's contents with every compression layer undone
  std::string path;                 // the file as given
  std::string origin;               // for errors about `bytes`: the path, plus " (after gzip)" etc. when decoded
  std::string name;                 // the path with one ".gz" / ".huf" suffix removed per layer undone
                                    // (used to recognise CIFAR-10 ".bin" files under compression)
  std::vector<Compression> layers;  // outermost first; empty for an uncompressed file
};

// Reads the whole file and undoes its compression layers. `threads` for the huffgpu CPU codec
// (0: all cores).
FileBytes read_file_decoded(const std::string& path, int threads = 0);

// Compressed files this process has decoded by read_file_decoded (each call that undid at least
// one layer counts once): dist-train reports it per rank, so that a node-local cache's one decode
// per node can be told from one per rank (measure/node_cache.h). Thread-safe.
uint64_t compressed_files_decoded();

// Gunzips an in-memory gzip stream (one or more members). `origin` names it in errors.
std::vector<uint8_t> gunzip(std::span<const uint8_t> data, const std::string& origin);

}  // namespace hpcnn::data
