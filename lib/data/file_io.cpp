#include "data/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace hpcnn::data {

File File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_error(ErrorKind::io, "cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw_error(ErrorKind::io, "cannot stat " + path + ": " + std::strerror(e));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw_error(ErrorKind::io, "cannot read " + path + ": it is a directory");
  }
  return File(fd, path, static_cast<uint64_t>(st.st_size));
}

File::File(File&& o) noexcept : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), size_(o.size_) {}

File& File::operator=(File&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
    path_ = std::move(o.path_);
    size_ = o.size_;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

size_t File::pread_some(void* buf, size_t n, uint64_t offset) const {
  size_t got = 0;
  auto* p = static_cast<char*>(buf);
  while (got < n) {
    const ssize_t r = ::pread(fd_, p + got, n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_error(ErrorKind::io, path_ + ": read error at offset " + std::to_string(offset + got) + ": " + std::strerror(errno));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

void File::pread_exact(void* buf, size_t n, uint64_t offset) const {
  const size_t got = pread_some(buf, n, offset);
  if (got < n)
    throw_error(ErrorKind::bad_input, path_ + ": offset " + std::to_string(offset + got) + ": truncated file (needed " +
                                          std::to_string(n) + " bytes at offset " + std::to_string(offset) + ")");
}

std::vector<uint8_t> File::read_all() const {
  std::vector<uint8_t> out(size_);
  const size_t got = pread_some(out.data(), out.size(), 0);
  out.resize(got);  // a file that shrank since open is read as it is now
  return out;
}

}  // namespace hpcnn::data
