#include "data/format.h"

#include <cstdio>
#include <cstring>

#include "core/error.h"
#include "data/cifar.h"
#include "data/idx.h"

namespace hpcnn::data {

const char* format_name(DataFormat f) {
  switch (f) {
    case DataFormat::idx:
      return "IDX";
    case DataFormat::npy:
      return "NPY";
    case DataFormat::cifar10:
      return "CIFAR-10 binary";
  }
  return "?";
}

DataFormat detect_format(const uint8_t* head, size_t n, uint64_t file_size, const std::string& name, const std::string& origin) {
  if (file_size == 0) throw_error(ErrorKind::bad_input, origin + ": offset 0: empty file");
  static constexpr uint8_t kNpyMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (n >= sizeof kNpyMagic && std::memcmp(head, kNpyMagic, sizeof kNpyMagic) == 0) return DataFormat::npy;
  if (looks_like_idx(head, n)) return DataFormat::idx;
  if (has_bin_extension(name)) return DataFormat::cifar10;
  std::string first;
  for (size_t i = 0; i < std::min<size_t>(n, 8); ++i) {
    char b[4];
    std::snprintf(b, sizeof b, "%s%02x", i ? " " : "", head[i]);
    first += b;
  }
  throw_error(ErrorKind::bad_input, origin +
                                        ": offset 0: unrecognised data file (not IDX, NPY, gzip, huffgpu, or a "
                                        "CIFAR-10 .bin file); its first bytes are " +
                                        first);
}

}  // namespace hpcnn::data
