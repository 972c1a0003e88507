// hpcnn data: recognising the format of an (uncompressed) data file.
//
// By content: IDX magic (data/idx.h), NumPy magic "\x93NUMPY" (data/npy.h); by name and size for
// CIFAR-10 binary, which has no header: a name ending in ".bin" (data/cifar.h). Compressed files
// are undone first (data/decompress.h), so the name passed is the one with .gz/.huf removed.
// Errors: ErrorKind::bad_input naming `origin` for an empty file or one that is none of these
// (showing its first bytes).
#pragma once

#include <cstdint>
#include <string>

namespace hpcnn::data {

enum class DataFormat : uint8_t { idx, npy, cifar10 };

const char* format_name(DataFormat f);  // "IDX", "NPY", "CIFAR-10 binary"

// `head`: the first `n` bytes of the file (8 suffice); `name`: its name for the .bin test.
DataFormat detect_format(const uint8_t* head, size_t n, uint64_t file_size, const std::string& name, const std::string& origin);

}  // namespace hpcnn::data
