// libFuzzer target: huffgpu-decode on arbitrary bytes must decode or throw hpcnn::Error, never
// crash, hang or read out of bounds (built with AddressSanitizer by tests/tools/fuzz.sh).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "huffman/stream.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("fuzz", 0);
  if (fd < 0) return 0;
  if (size && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  ::lseek(fd, 0, SEEK_SET);
  try {
    hpcnn::huffman::decode_stream(
        fd, [](const uint8_t*, size_t) {}, 2);
  } catch (const hpcnn::Error&) {
  }
  ::close(fd);
  return 0;
}
