// hpcnn data: the IDX file format of MNIST and Fashion-MNIST (yann.lecun.com/exdb/mnist).
//
// A file is a 4-byte magic 00 00 <type> <ndims>, ndims big-endian uint32 dims, then the data in
// row-major order. Read here: type 0x08 (unsigned byte) with 3 dims (images: N, rows, cols) or
// 1 dim (labels: N). The data must fill the rest of the file exactly.
// Errors name `origin` and the byte offset: ErrorKind::bad_input (truncated header or data,
// bytes after the data, zero-sized images, wrong number of dims for the role),
// ErrorKind::unsupported (other element types: 0x09 signed byte, 0x0B short, 0x0C int,
// 0x0D float, 0x0E double).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::data {

inline constexpr size_t kIdxMaxHeaderBytes = 4 + 4 * 4;  // magic and up to 4 dims

// True when the first bytes look like an IDX magic (00 00, a known type code, 1..4 dims).
bool looks_like_idx(const uint8_t* p, size_t n);

struct IdxHeader {
  uint8_t type = 0;
  std::vector<int64_t> dims;
  uint64_t data_offset = 0;  // 4 + 4 * ndims
};

// Parses the header from the first `n` bytes `p` of a file of `file_size` bytes and checks the
// element type (unsigned byte) and that the data fills the file exactly.
IdxHeader parse_idx_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin);

// The header of an images file: 3 dims (N, rows, cols), rows and cols > 0.
IdxHeader parse_idx_images_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin);
// The header of a labels file: 1 dim (N).
IdxHeader parse_idx_labels_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin);

}  // namespace hpcnn::data
