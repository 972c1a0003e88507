#include "data/npy.h"

#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "core/error.h"

namespace hpcnn::data {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

namespace {

constexpr unsigned char kMagic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
constexpr size_t kMaxHeaderLen = size_t{1} << 20;  // numpy itself refuses headers over 10000 bytes by default

[[noreturn]] void fail(ErrorKind kind, const std::string& origin, uint64_t offset, const std::string& what) {
  throw_error(kind, origin + ": offset " + std::to_string(offset) + ": " + what);
}

size_t item_size_of(const std::string& dtype) {
  if (dtype == "|u1") return 1;
  if (dtype == "<i2") return 2;
  if (dtype == "<f4" || dtype == "<i4") return 4;
  if (dtype == "<f8" || dtype == "<i8") return 8;
  return 0;
}

// The fixed part before the header dict: magic, version, header length.
struct Preamble {
  int major = 0;
  uint64_t header_offset = 0;  // where the dict starts
  uint64_t header_len = 0;
};

// `p` holds the first `n` bytes of the file (n may be short: the file is then truncated).
Preamble parse_preamble(const unsigned char* p, size_t n, const std::string& origin) {
  if (n == 0) fail(ErrorKind::bad_input, origin, 0, "empty file, not an .npy array");
  const size_t m = std::min<size_t>(n, sizeof(kMagic));
  if (std::memcmp(p, kMagic, m) != 0) fail(ErrorKind::bad_input, origin, 0, "not an .npy file (bad magic)");
  if (n < 8) fail(ErrorKind::bad_input, origin, n, "truncated before the format version");
  Preamble pre;
  pre.major = p[6];
  const int minor = p[7];
  if ((pre.major != 1 && pre.major != 2 && pre.major != 3) || minor != 0)
    fail(ErrorKind::unsupported, origin, 6,
         "unsupported .npy format version " + std::to_string(pre.major) + "." + std::to_string(minor) +
             " (1.0, 2.0 and 3.0 are read)");
  const size_t len_bytes = pre.major == 1 ? 2 : 4;
  if (n < 8 + len_bytes) fail(ErrorKind::bad_input, origin, n, "truncated before the header length");
  uint64_t len = 0;
  for (size_t i = 0; i < len_bytes; ++i) len |= uint64_t{p[8 + i]} << (8 * i);
  pre.header_offset = 8 + len_bytes;
  pre.header_len = len;
  if (len > kMaxHeaderLen)
    fail(ErrorKind::bad_input, origin, 8, "header length " + std::to_string(len) + " is implausibly large");
  return pre;
}

// A parser for the header's Python dict literal.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, uint64_t base, const std::string& origin) : s_(text), base_(base), origin_(origin) {}

  NpyArray parse() {
    NpyArray a;
    a.origin = origin_;
    bool have_descr = false, have_order = false, have_shape = false;
    skip_ws();
    expect('{');
    for (;;) {
      skip_ws();
      if (peek() == '}') break;
      const size_t key_pos = i_;
      const std::string key = string_literal();
      skip_ws();
      expect(':');
      skip_ws();
      if (key == "descr") {
        if (have_descr) bad(key_pos, "duplicate key 'descr'");
        have_descr = true;
        const size_t at = i_;
        if (peek() != '\'' && peek() != '"')
          fail(ErrorKind::unsupported, origin_, base_ + at, "structured dtypes are not supported (descr is not a string)");
        a.dtype = canonical_dtype(string_literal(), at);
      } else if (key == "fortran_order") {
        if (have_order) bad(key_pos, "duplicate key 'fortran_order'");
        have_order = true;
        const size_t at = i_;
        if (word("True"))
          fail(ErrorKind::unsupported, origin_, base_ + at, "fortran_order True arrays are not supported (save in C order)");
        if (!word("False")) bad(at, "fortran_order must be True or False");
      } else if (key == "shape") {
        if (have_shape) bad(key_pos, "duplicate key 'shape'");
        have_shape = true;
        a.shape = shape_tuple();
      } else {
        bad(key_pos, "unexpected key '" + key + "' in the header");
      }
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() != '}') bad(i_, "expected ',' or '}' in the header dict");
    }
    ++i_;  // '}'
    skip_ws();
    if (i_ != s_.size()) bad(i_, "unexpected characters after the header dict");
    if (!have_descr || !have_order || !have_shape) bad(0, "the header lacks one of 'descr', 'fortran_order', 'shape'");
    return a;
  }

 private:
  [[noreturn]] void bad(size_t at, const std::string& what) { fail(ErrorKind::bad_input, origin_, base_ + at, what); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) bad(i_, std::string("expected '") + c + "' in the header");
    ++i_;
  }
  bool word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    const size_t end = i_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
    i_ = end;
    return true;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') bad(i_, "expected a quoted string in the header");
    const size_t start = ++i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\n') break;  // Python string literals do not span lines
      if (s_[i_] == '\\') bad(i_, "escape sequences in header strings are not supported");
      ++i_;
    }
    if (i_ >= s_.size() || s_[i_] != q) bad(start - 1, "unterminated string in the header");
    return std::string(s_.substr(start, i_++ - start));
  }
  std::vector<int64_t> shape_tuple() {
    std::vector<int64_t> shape;
    expect('(');
    for (;;) {
      skip_ws();
      if (peek() == ')') break;
      const size_t at = i_;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) bad(at, "shape entries must be non-negative integers");
      int64_t v = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        const int d = peek() - '0';
        if (v > (std::numeric_limits<int64_t>::max() - d) / 10) bad(at, "shape entry overflows int64");
        v = v * 10 + d;
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 long literal
      shape.push_back(v);
      skip_ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      skip_ws();
      if (peek() != ')') bad(i_, "expected ',' or ')' in the shape tuple");
    }
    ++i_;  // ')'
    return shape;
  }
  std::string canonical_dtype(const std::string& d, size_t at) {
    if (d == "<u1" || d == ">u1" || d == "=u1" || d == "|u1") return "|u1";
    if (d == "<f4" || d == "<f8" || d == "<i2" || d == "<i4" || d == "<i8") return d;
    std::string why = "dtype '" + d + "' is not supported (supported: <f4, <f8, |u1, <i2, <i4, <i8)";
    if (!d.empty() && d[0] == '>') why += "; the array is big-endian";
    fail(ErrorKind::unsupported, origin_, base_ + at, why);
  }

  std::string_view s_;
  size_t i_ = 0;
  uint64_t base_;
  const std::string& origin_;
};

// Parses the header text and checks the data size; returns the number of data bytes.
uint64_t finish_header(NpyArray& a, uint64_t data_offset, uint64_t file_size) {
  // Overflow-checked numel * item size (the header is untrusted).
  uint64_t n = 1;
  for (int64_t d : a.shape) {
    const auto u = static_cast<uint64_t>(d);
    if (u != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / u)
      fail(ErrorKind::bad_input, a.origin, data_offset, "shape " + shape_to_string(a.shape) + " overflows");
    n *= u;
  }
  const uint64_t item = item_size_of(a.dtype);
  if (n != 0 && item > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n)
    fail(ErrorKind::bad_input, a.origin, data_offset, "shape " + shape_to_string(a.shape) + " overflows");
  const uint64_t need = n * item;
  const uint64_t have = file_size - data_offset;
  if (have < need)
    fail(ErrorKind::bad_input, a.origin, file_size,
         "truncated data: shape " + shape_to_string(a.shape) + " of " + a.dtype + " needs " + std::to_string(need) +
             " bytes after offset " + std::to_string(data_offset) + ", the file has " + std::to_string(have));
  if (have > need)
    fail(ErrorKind::bad_input, a.origin, data_offset + need,
         std::to_string(have - need) + " unexpected bytes after the array data");
  return need;
}

NpyArray parse_header_text(std::string_view text, const Preamble& pre, const std::string& origin) {
  return HeaderParser(text, pre.header_offset, origin).parse();
}

}  // namespace

int64_t NpyArray::numel() const { return shape_numel(shape); }
size_t NpyArray::item_size() const { return item_size_of(dtype); }

NpyArray parse_npy(std::span<const unsigned char> data, const std::string& origin) {
  const Preamble pre = parse_preamble(data.data(), data.size(), origin);
  const uint64_t data_offset = pre.header_offset + pre.header_len;
  if (data.size() < data_offset)
    fail(ErrorKind::bad_input, origin, data.size(), "truncated header (" + std::to_string(pre.header_len) + " bytes declared)");
  const std::string_view text(reinterpret_cast<const char*>(data.data() + pre.header_offset), pre.header_len);
  NpyArray a = parse_header_text(text, pre, origin);
  const uint64_t need = finish_header(a, data_offset, data.size());
  a.bytes.assign(data.begin() + static_cast<ptrdiff_t>(data_offset), data.begin() + static_cast<ptrdiff_t>(data_offset + need));
  return a;
}

namespace {
// Opens `path` and parses its preamble and header (checked against the file size); `in` is
// left open at the start of the array data.
NpyArray open_npy(const std::string& path, std::ifstream& in, uint64_t& data_offset, uint64_t& need) {
  in.open(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::io, "cannot open " + path);
  in.seekg(0, std::ios::end);
  const std::streamoff end = in.tellg();
  in.seekg(0, std::ios::beg);
  if (end < 0 || !in) throw_error(ErrorKind::io, "cannot determine the size of " + path);
  const auto file_size = static_cast<uint64_t>(end);

  unsigned char head[12] = {};
  const size_t head_n = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof(head)));
  if (!in.read(reinterpret_cast<char*>(head), static_cast<std::streamsize>(head_n)))
    throw_error(ErrorKind::io, "cannot read " + path);
  const Preamble pre = parse_preamble(head, head_n, path);
  data_offset = pre.header_offset + pre.header_len;
  if (file_size < data_offset)
    fail(ErrorKind::bad_input, path, file_size, "truncated header (" + std::to_string(pre.header_len) + " bytes declared)");
  std::string text(pre.header_len, '\0');
  in.seekg(static_cast<std::streamoff>(pre.header_offset));
  if (!in.read(text.data(), static_cast<std::streamsize>(text.size()))) throw_error(ErrorKind::io, "cannot read " + path);
  NpyArray a = parse_header_text(text, pre, path);
  need = finish_header(a, data_offset, file_size);
  return a;
}
}  // namespace

NpyArray read_npy(const std::string& path) {
  std::ifstream in;
  uint64_t data_offset = 0, need = 0;
  NpyArray a = open_npy(path, in, data_offset, need);
  a.bytes.resize(need);
  if (need && !in.read(reinterpret_cast<char*>(a.bytes.data()), static_cast<std::streamsize>(need)))
    throw_error(ErrorKind::io, "cannot read the array data of " + path);
  return a;
}

NpyArray read_npy_header(const std::string& path, uint64_t* data_offset) {
  std::ifstream in;
  uint64_t offset = 0, need = 0;
  NpyArray a = open_npy(path, in, offset, need);
  if (data_offset) *data_offset = offset;
  return a;
}

Tensor npy_to_tensor(const NpyArray& a) {
  if (a.dtype != "<f4" && a.dtype != "<f8")
    throw_error(ErrorKind::unsupported, a.origin + ": dtype " + a.dtype + " cannot become an fp32 tensor (<f4 or <f8 expected)");
  Tensor t(a.shape);
  if (a.bytes.size() != static_cast<size_t>(t.numel()) * a.item_size())
    throw_error(ErrorKind::bad_input, a.origin + ": " + std::to_string(a.bytes.size()) + " bytes of data for shape " +
                                          shape_to_string(a.shape) + " of " + a.dtype);
  if (a.dtype == "<f4") {
    if (!a.bytes.empty()) std::memcpy(t.data(), a.bytes.data(), a.bytes.size());
  } else {
    for (int64_t i = 0; i < t.numel(); ++i) {
      double v;
      std::memcpy(&v, a.bytes.data() + i * 8, 8);
      t.data()[i] = static_cast<float>(v);
    }
  }
  return t;
}

std::vector<int32_t> npy_to_labels(const NpyArray& a) {
  if (a.dtype != "|u1" && a.dtype != "<i4" && a.dtype != "<i8")
    throw_error(ErrorKind::unsupported, a.origin + ": labels must be integers (|u1, <i4, <i8), not " + a.dtype);
  if (a.shape.size() != 1)
    throw_error(ErrorKind::bad_input, a.origin + ": labels must be a 1-D array, not shape " + shape_to_string(a.shape));
  const auto n = static_cast<size_t>(a.shape[0]);
  if (a.bytes.size() != n * a.item_size())
    throw_error(ErrorKind::bad_input, a.origin + ": " + std::to_string(a.bytes.size()) + " bytes of data for " +
                                          std::to_string(n) + " labels of " + a.dtype);
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (a.dtype == "|u1") {
      out[i] = a.bytes[i];
    } else if (a.dtype == "<i4") {
      std::memcpy(&out[i], a.bytes.data() + i * 4, 4);
    } else {
      int64_t v;
      std::memcpy(&v, a.bytes.data() + i * 8, 8);
      if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        throw_error(ErrorKind::bad_input,
                    a.origin + ": label " + std::to_string(i) + " = " + std::to_string(v) + " does not fit int32");
      out[i] = static_cast<int32_t>(v);
    }
  }
  return out;
}

Targets npy_to_targets(const NpyArray& a) {
  if (a.dtype != "<f4" && a.dtype != "<f8")
    throw_error(ErrorKind::unsupported, a.origin + ": regression targets must be floats (<f4 or <f8), not " + a.dtype);
  if (a.shape.size() != 1 && a.shape.size() != 2)
    throw_error(ErrorKind::bad_input,
                a.origin + ": regression targets must have shape (N, K) or (N,), not " + shape_to_string(a.shape));
  Targets t;
  t.count = a.shape[0];
  t.width = a.shape.size() == 2 ? a.shape[1] : 1;
  if (t.width < 1)
    throw_error(ErrorKind::bad_input, a.origin + ": regression targets of shape " + shape_to_string(a.shape) + " have no values");
  const auto n = static_cast<size_t>(t.count * t.width);
  t.values.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (a.dtype == "<f4") {
      std::memcpy(&t.values[i], a.bytes.data() + i * 4, 4);
    } else {
      double v;
      std::memcpy(&v, a.bytes.data() + i * 8, 8);
      t.values[i] = static_cast<float>(v);
    }
    if (!std::isfinite(t.values[i]))
      throw_error(ErrorKind::bad_input, a.origin + ": target " + std::to_string(i % static_cast<size_t>(t.width)) +
                                            " of sample " + std::to_string(i / static_cast<size_t>(t.width)) + " is " +
                                            std::to_string(t.values[i]) + " (targets must be finite)");
  }
  return t;
}

}  // namespace hpcnn::data
