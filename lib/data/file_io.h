// hpcnn data: an open file read by offset (pread), for the data readers.
//
// Thread-safe: pread does not move a shared file position, so loader threads can read samples
// of one File concurrently. Errors: ErrorKind::io naming the path (cannot open, read error);
// ErrorKind::bad_input when pread_exact finds the file shorter than expected (truncated or
// shrunk while open), naming the path and the offset.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpcnn::data {

class File {
 public:
  static File open(const std::string& path);  // read-only
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // at open time

  // Reads up to n bytes at `offset`; fewer only at the end of the file.
  size_t pread_some(void* buf, size_t n, uint64_t offset) const;
  // Reads exactly n bytes at `offset` (bad_input "truncated" otherwise).
  void pread_exact(void* buf, size_t n, uint64_t offset) const;
  // The whole file.
  std::vector<uint8_t> read_all() const;

 private:
  File(int fd, std::string path, uint64_t size) : fd_(fd), path_(std::move(path)), size_(size) {}
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

}  // namespace hpcnn::data
