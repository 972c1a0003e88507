// hpcnn data: reader for NumPy .npy files (format versions 1.0, 2.0 and 3.0; see
// numpy/lib/format.py, "NPY format specification").
//
// A file is the magic "\x93NUMPY", a version (major, minor), a header length (2 bytes
// little-endian for 1.0, 4 bytes for 2.0/3.0), a Python dict literal
// {'descr': ..., 'fortran_order': ..., 'shape': (...)} and the array data.
// Supported: C order (fortran_order False) and the little-endian dtypes '<f4', '<f8', '|u1',
// '<i2', '<i4', '<i8' ('<u1', '>u1', '=u1' are read as '|u1'). Any shape, including 0-d (shape ())
// and arrays with a zero dim.
// Errors name the file (or `origin`) and the byte offset:
//   ErrorKind::io          the file cannot be opened or read;
//   ErrorKind::bad_input   not an .npy file (magic), truncated header or data, malformed
//                          header dict, negative/overflowing shape, bytes after the data;
//   ErrorKind::unsupported other versions, fortran_order True, big-endian or other dtypes
//                          (structured, strings, objects, float16, ...).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::data {

struct NpyArray {
  std::vector<int64_t> shape;        // empty for a 0-d array
  std::string dtype;                 // canonical descr: "<f4", "<f8", "|u1", "<i2", "<i4" or "<i8"
  std::vector<unsigned char> bytes;  // numel * item size bytes, C order, little-endian
  std::string origin;                // the file path (or the name given to parse_npy), for errors

  int64_t numel() const;     // product of shape (1 for 0-d)
  size_t item_size() const;  // bytes per element of dtype
};

// Reads a whole .npy file. The data size is checked against the file size before allocating.
NpyArray read_npy(const std::string& path);
// Reads only the preamble and header of an .npy file, for readers that fetch the data in pieces
// (data/source.h): the result has an empty `bytes`; the data (numel * item_size bytes, checked
// against the file size as read_npy does) starts at byte *data_offset. Errors as read_npy.
NpyArray read_npy_header(const std::string& path, uint64_t* data_offset);
// Parses an in-memory .npy image; `origin` names it in errors.
NpyArray parse_npy(std::span<const unsigned char> data, const std::string& origin);

// '<f4' or '<f8' array -> fp32 Tensor of the same shape (plain layout; '<f8' rounded to
// nearest). ErrorKind::unsupported for other dtypes, naming the file.
Tensor npy_to_tensor(const NpyArray& array);

// 1-D integer array ('|u1', '<i4', '<i8') of class labels -> int32 values. ErrorKind::bad_input
// for another rank or an '<i8' value outside int32 (naming the file and index);
// ErrorKind::unsupported for float dtypes. Range against the class count is the loss's check.
std::vector<int32_t> npy_to_labels(const NpyArray& array);

// Regression targets: K float values per sample, samples one after another.
struct Targets {
  int64_t count = 0;          // N
  int64_t width = 0;          // K
  std::vector<float> values;  // N * K, row-major
};

// '<f4' or '<f8' array of shape (N, K), or (N,) for K = 1 -> fp32 targets. ErrorKind::unsupported
// for another dtype (integers are class labels: npy_to_labels); ErrorKind::bad_input for another
// rank, K = 0, or a NaN or infinite value (naming the file, the sample and the target).
Targets npy_to_targets(const NpyArray& array);

}  // namespace hpcnn::data
