// hpcnn data: the CIFAR-10 binary format (www.cs.toronto.edu/~kriz/cifar.html, "Binary version").
//
// A batch file (data_batch_1.bin ... data_batch_5.bin, test_batch.bin) is a sequence of 3073-byte
// records: one label byte (0..9), then 3072 pixel bytes: the 1024 red, 1024 green and 1024 blue
// values of a 32x32 image, each in row-major order (CHW). There is no header, so a file is taken
// as CIFAR-10 by its name (".bin") and size.
// Errors name `origin` and the byte offset: ErrorKind::bad_input for an empty file, a size that
// is not a whole number of records, a label over 9 (offset of the label byte).
#pragma once

#include <cstdint>
#include <string>

namespace hpcnn::data {

inline constexpr int64_t kCifarChannels = 3;
inline constexpr int64_t kCifarSize = 32;                                              // height and width
inline constexpr int64_t kCifarPixelBytes = kCifarChannels * kCifarSize * kCifarSize;  // 3072
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarPixelBytes;                     // 3073
inline constexpr int32_t kCifarClasses = 10;

// True when `name` ends in ".bin".
bool has_bin_extension(const std::string& name);

// The number of records of a file of `size` bytes.
int64_t cifar_record_count(uint64_t size, const std::string& origin);

// Checks the label byte of record `index` (bad_input when over 9).
int32_t cifar_label(uint8_t byte, int64_t index, const std::string& origin);

}  // namespace hpcnn::data
