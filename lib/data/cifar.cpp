#include "data/cifar.h"

#include "core/error.h"

namespace hpcnn::data {

bool has_bin_extension(const std::string& name) { return name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0; }

int64_t cifar_record_count(uint64_t size, const std::string& origin) {
  if (size == 0) throw_error(ErrorKind::bad_input, origin + ": offset 0: empty file, no CIFAR-10 records");
  const uint64_t rec = static_cast<uint64_t>(kCifarRecordBytes);
  if (size % rec != 0)
    throw_error(ErrorKind::bad_input, origin + ": offset " + std::to_string(size - size % rec) +
                                          ": a CIFAR-10 binary file holds " + std::to_string(kCifarRecordBytes) +
                                          "-byte records; its size " + std::to_string(size) + " leaves a partial record of " +
                                          std::to_string(size % rec) + " bytes (truncated file?)");
  return static_cast<int64_t>(size / rec);
}

int32_t cifar_label(uint8_t byte, int64_t index, const std::string& origin) {
  if (byte >= kCifarClasses)
    throw_error(ErrorKind::bad_input, origin + ": offset " + std::to_string(index * kCifarRecordBytes) + ": record " +
                                          std::to_string(index) + " has label " + std::to_string(byte) +
                                          ", CIFAR-10 labels are 0..9 (not a CIFAR-10 binary file?)");
  return byte;
}

}  // namespace hpcnn::data
