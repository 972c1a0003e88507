#include "data/idx.h"

#include "core/error.h"

namespace hpcnn::data {

namespace {

[[noreturn]] void fail(ErrorKind kind, const std::string& origin, uint64_t offset, const std::string& what) {
  throw_error(kind, origin + ": offset " + std::to_string(offset) + ": " + what);
}

bool known_type(uint8_t t) { return t == 0x08 || t == 0x09 || t == 0x0B || t == 0x0C || t == 0x0D || t == 0x0E; }

const char* type_name(uint8_t t) {
  switch (t) {
    case 0x08:
      return "unsigned byte";
    case 0x09:
      return "signed byte";
    case 0x0B:
      return "short";
    case 0x0C:
      return "int";
    case 0x0D:
      return "float";
    case 0x0E:
      return "double";
  }
  return "unknown";
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

}  // namespace

bool looks_like_idx(const uint8_t* p, size_t n) {
  return n >= 4 && p[0] == 0 && p[1] == 0 && known_type(p[2]) && p[3] >= 1 && p[3] <= 4;
}

IdxHeader parse_idx_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin) {
  if (file_size == 0) fail(ErrorKind::bad_input, origin, 0, "empty file, not an IDX file");
  if (n < 4) fail(ErrorKind::bad_input, origin, n, "truncated IDX magic");
  if (!looks_like_idx(p, n)) fail(ErrorKind::bad_input, origin, 0, "not an IDX file (bad magic)");
  IdxHeader h;
  h.type = p[2];
  const int nd = p[3];
  h.data_offset = 4 + 4 * static_cast<uint64_t>(nd);
  if (n < h.data_offset || file_size < h.data_offset)
    fail(ErrorKind::bad_input, origin, std::min<uint64_t>(n, file_size),
         "truncated IDX header (" + std::to_string(nd) + " dims declared)");
  if (h.type != 0x08)
    fail(ErrorKind::unsupported, origin, 2,
         std::string("IDX element type ") + type_name(h.type) + " is not supported (unsigned byte, 0x08, is read)");
  unsigned __int128 numel = 1;
  for (int i = 0; i < nd; ++i) {
    const uint8_t* d = p + 4 + 4 * i;
    const uint32_t v = (uint32_t{d[0]} << 24) | (uint32_t{d[1]} << 16) | (uint32_t{d[2]} << 8) | uint32_t{d[3]};
    h.dims.push_back(v);
    numel *= v;
  }
  const uint64_t have = file_size - h.data_offset;
  if (numel > have)
    fail(ErrorKind::bad_input, origin, file_size,
         "truncated data: dims " + dims_string(h.dims) + " need " +
             (numel > UINT64_MAX ? std::string("more than 2^64") : std::to_string(static_cast<uint64_t>(numel))) +
             " bytes after offset " + std::to_string(h.data_offset) + ", the file has " + std::to_string(have));
  if (numel < have)
    fail(ErrorKind::bad_input, origin, h.data_offset + static_cast<uint64_t>(numel),
         std::to_string(have - static_cast<uint64_t>(numel)) + " unexpected bytes after the data of dims " + dims_string(h.dims));
  return h;
}

namespace {

// The header of an IDX file that must have `rank` dims (offset 3 holds the count); an `other`
// rank gets a hint naming the kind of file it probably is.
IdxHeader parse_idx_header_of_rank(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin, size_t rank,
                                   const std::string& what, size_t other, const std::string& hint) {
  IdxHeader h = parse_idx_header(p, n, file_size, origin);
  if (h.dims.size() != rank)
    fail(ErrorKind::bad_input, origin, 3,
         what + ", this one has " + std::to_string(h.dims.size()) + (h.dims.size() == other ? " (" + hint + ")" : ""));
  return h;
}

}  // namespace

IdxHeader parse_idx_images_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin) {
  IdxHeader h = parse_idx_header_of_rank(p, n, file_size, origin, 3, "an IDX images file has 3 dims (count, rows, cols)", 1,
                                         "a labels file?");
  if (h.dims[1] == 0 || h.dims[2] == 0)
    fail(ErrorKind::bad_input, origin, 8, "images of size " + std::to_string(h.dims[1]) + "x" + std::to_string(h.dims[2]));
  return h;
}

IdxHeader parse_idx_labels_header(const uint8_t* p, size_t n, uint64_t file_size, const std::string& origin) {
  return parse_idx_header_of_rank(p, n, file_size, origin, 1, "an IDX labels file has 1 dim (count)", 3, "an images file?");
}

}  // namespace hpcnn::data
