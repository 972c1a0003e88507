#include "onnx/tensor.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace hpcnn::onnxu {
namespace {

using TP = onnx::TensorProto;

std::string tensor_label(const TP& t) { return "tensor '" + t.name() + "'"; }

float half_to_float(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

void check_raw_size(const TP& t) {
  int64_t n = numel(t);
  size_t es = element_size(t.data_type());
  if (static_cast<uint64_t>(t.raw_data().size()) != static_cast<uint64_t>(n) * es)
    throw_error(ErrorKind::bad_input, tensor_label(t) + " has " + std::to_string(t.raw_data().size()) +
                                          " bytes of data but its shape " + dims_to_string(dims_of(t)) + " and dtype " +
                                          dtype_name(t.data_type()) + " need " + std::to_string(static_cast<uint64_t>(n) * es));
}

template <class T>
T read_le(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

double raw_value(const char* p, int32_t dt) {
  switch (dt) {
    case TP::FLOAT:
      return read_le<float>(p);
    case TP::DOUBLE:
      return read_le<double>(p);
    case TP::FLOAT16:
      return half_to_float(read_le<uint16_t>(p));
    case TP::BFLOAT16:
      return bf16_to_float(read_le<uint16_t>(p));
    case TP::INT8:
      return read_le<int8_t>(p);
    case TP::UINT8:
      return read_le<uint8_t>(p);
    case TP::INT16:
      return read_le<int16_t>(p);
    case TP::UINT16:
      return read_le<uint16_t>(p);
    case TP::INT32:
      return read_le<int32_t>(p);
    case TP::UINT32:
      return read_le<uint32_t>(p);
    case TP::INT64:
      return static_cast<double>(read_le<int64_t>(p));
    case TP::UINT64:
      return static_cast<double>(read_le<uint64_t>(p));
    case TP::BOOL:
      return read_le<uint8_t>(p) ? 1.0 : 0.0;
    default:
      throw_error(ErrorKind::unsupported, "dtype " + dtype_name(dt) + " has no numeric value");
  }
}

}  // namespace

int64_t numel(const Dims& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw_error(ErrorKind::bad_input, "negative dimension in shape " + dims_to_string(dims));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      throw_error(ErrorKind::bad_input, "shape " + dims_to_string(dims) + " overflows 64 bits");
    n *= d;
  }
  return n;
}

int64_t numel(const TP& t) {
  return with_context("while reading " + tensor_label(t), [&] { return numel(dims_of(t)); });
}

Dims dims_of(const TP& t) { return Dims(t.dims().begin(), t.dims().end()); }

std::string dims_to_string(const Dims& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

std::string dtype_name(int32_t dt) {
  if (TP::DataType_IsValid(dt)) return TP::DataType_Name(static_cast<TP::DataType>(dt));
  return "dtype#" + std::to_string(dt);
}

bool is_floating(int32_t dt) { return dt == TP::FLOAT || dt == TP::DOUBLE || dt == TP::FLOAT16 || dt == TP::BFLOAT16; }

size_t element_size(int32_t dt) {
  switch (dt) {
    case TP::FLOAT:
    case TP::INT32:
    case TP::UINT32:
      return 4;
    case TP::DOUBLE:
    case TP::INT64:
    case TP::UINT64:
    case TP::COMPLEX64:
      return 8;
    case TP::FLOAT16:
    case TP::BFLOAT16:
    case TP::INT16:
    case TP::UINT16:
      return 2;
    case TP::INT8:
    case TP::UINT8:
    case TP::BOOL:
      return 1;
    case TP::COMPLEX128:
      return 16;
    case 17:
    case 18:
    case 19:
    case 20:
      return 1;  // float8 variants (IR 9)
    default:
      throw_error(ErrorKind::unsupported, "dtype " + dtype_name(dt) + " has no fixed element size");
  }
}

void check_tensor_size(const TP& t) {
  if (t.data_location() == TP::EXTERNAL) throw_error(ErrorKind::bad_input, tensor_label(t) + ": external data was not loaded");
  if (!t.raw_data().empty()) return check_raw_size(t);
  const int64_t n = numel(t);
  const int64_t held = t.float_data_size() + t.double_data_size() + t.int64_data_size() + t.int32_data_size() +
                       t.uint64_data_size() + static_cast<int64_t>(t.string_data_size());
  if (held != n)
    throw_error(ErrorKind::bad_input, tensor_label(t) + " holds " + std::to_string(held) + " values but its shape " +
                                          dims_to_string(dims_of(t)) + " needs " + std::to_string(n));
}

void ensure_raw(TP& t) {
  with_context("while reading " + tensor_label(t), [&] {
    if (t.data_location() == TP::EXTERNAL) throw_error(ErrorKind::bad_input, "external data was not loaded");
    const int32_t dt = t.data_type();
    const size_t es = element_size(dt);
    const int64_t n = numel(t);
    std::string raw;
    auto take = [&](const auto& field, auto conv) {
      if (field.size() == 0) return false;
      if (static_cast<int64_t>(field.size()) != n)
        throw_error(ErrorKind::bad_input, "holds " + std::to_string(field.size()) + " values but its shape " +
                                              dims_to_string(dims_of(t)) + " needs " + std::to_string(n));
      raw.resize(static_cast<size_t>(n) * es);
      for (int64_t i = 0; i < n; ++i) conv(field.Get(static_cast<int>(i)), raw.data() + i * es);
      return true;
    };
    auto copy_as = [](auto v, char* dst, size_t es2) { std::memcpy(dst, &v, es2); };
    bool had = false;
    switch (dt) {
      case TP::FLOAT:
        had = take(t.float_data(), [&](float v, char* d) { copy_as(v, d, 4); });
        break;
      case TP::DOUBLE:
        had = take(t.double_data(), [&](double v, char* d) { copy_as(v, d, 8); });
        break;
      case TP::INT64:
        had = take(t.int64_data(), [&](int64_t v, char* d) { copy_as(v, d, 8); });
        break;
      case TP::UINT32:
      case TP::UINT64:
        had = take(t.uint64_data(), [&](uint64_t v, char* d) {
          if (es == 4)
            copy_as(static_cast<uint32_t>(v), d, 4);
          else
            copy_as(v, d, 8);
        });
        break;
      case TP::COMPLEX64:
        if (t.float_data_size()) throw_error(ErrorKind::unsupported, "COMPLEX64 in float_data is not supported");
        break;
      default:  // int32_data holds INT32, INT16, INT8, UINT16, UINT8, BOOL, FLOAT16, BFLOAT16, float8
        had = take(t.int32_data(), [&](int32_t v, char* d) {
          uint32_t u = static_cast<uint32_t>(v);
          std::memcpy(d, &u, es);  // little-endian: the low bytes
        });
    }
    if (had) {
      t.clear_float_data();
      t.clear_double_data();
      t.clear_int64_data();
      t.clear_int32_data();
      t.clear_uint64_data();
      t.set_raw_data(std::move(raw));
    } else if (!t.has_raw_data() && n != 0) {
      throw_error(ErrorKind::bad_input, "has no data for its shape " + dims_to_string(dims_of(t)));
    }
    if (t.has_raw_data() || n == 0) {
      if (!t.has_raw_data()) t.set_raw_data(std::string());
      check_raw_size(t);
    }
  });
}

void for_each_float_block_impl(const TP& t, void (*cb)(void*, const float*, size_t), void* ctx) {
  const int32_t dt = t.data_type();
  if (!is_floating(dt))
    throw_error(ErrorKind::unsupported, tensor_label(t) + " has dtype " + dtype_name(dt) + ", expected a float type");
  if (!t.has_raw_data()) {
    if (dt == TP::FLOAT) {
      if (t.float_data_size() != numel(t))
        throw_error(ErrorKind::bad_input, tensor_label(t) + " holds " + std::to_string(t.float_data_size()) +
                                              " values but its shape " + dims_to_string(dims_of(t)) + " needs " +
                                              std::to_string(numel(t)));
      cb(ctx, t.float_data().data(), static_cast<size_t>(t.float_data_size()));
      return;
    }
    TP copy = t;
    ensure_raw(copy);
    for_each_float_block_impl(copy, cb, ctx);
    return;
  }
  check_raw_size(t);
  const std::string& raw = t.raw_data();
  const size_t es = element_size(dt);
  const size_t n = raw.size() / es;
  constexpr size_t kBlock = 1 << 14;
  float buf[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    if (dt == TP::FLOAT) {
      std::memcpy(buf, raw.data() + i * 4, m * 4);
    } else {
      for (size_t j = 0; j < m; ++j) buf[j] = static_cast<float>(raw_value(raw.data() + (i + j) * es, dt));
    }
    cb(ctx, buf, m);
  }
}

std::vector<double> to_doubles(const TP& t) {
  TP copy = t;
  ensure_raw(copy);
  const size_t es = element_size(copy.data_type());
  const size_t n = copy.raw_data().size() / es;
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = raw_value(copy.raw_data().data() + i * es, copy.data_type());
  return out;
}

std::vector<int64_t> to_int64s(const TP& t) {
  if (t.data_type() != TP::INT64 && t.data_type() != TP::INT32)
    throw_error(ErrorKind::bad_input, tensor_label(t) + " has dtype " + dtype_name(t.data_type()) + ", expected INT64");
  TP copy = t;
  ensure_raw(copy);
  const size_t es = element_size(copy.data_type());
  const size_t n = copy.raw_data().size() / es;
  std::vector<int64_t> out(n);
  for (size_t i = 0; i < n; ++i)
    out[i] = es == 8 ? read_le<int64_t>(copy.raw_data().data() + i * 8) : read_le<int32_t>(copy.raw_data().data() + i * 4);
  return out;
}

std::vector<double> l1_norms_along(const TP& t, int axis) {
  const Dims dims = dims_of(t);
  if (axis < 0 || axis >= static_cast<int>(dims.size()))
    throw_error(ErrorKind::bad_input,
                tensor_label(t) + " of shape " + dims_to_string(dims) + " has no axis " + std::to_string(axis));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= dims[i];
  for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
  const int64_t c = dims[axis];
  std::vector<double> norms(static_cast<size_t>(c), 0.0);
  int64_t pos = 0;
  for_each_float_block(t, [&](const float* p, size_t n) {
    size_t j = 0;
    while (j < n) {
      int64_t ch = (pos / inner) % c;
      int64_t run = std::min<int64_t>(inner - pos % inner, static_cast<int64_t>(n - j));
      double s = 0;
      for (int64_t k = 0; k < run; ++k) s += std::fabs(static_cast<double>(p[j + k]));
      norms[static_cast<size_t>(ch)] += s;
      j += static_cast<size_t>(run);
      pos += run;
    }
  });
  (void)outer;
  return norms;
}

void slice_axis(TP& t, int axis, const std::vector<int64_t>& keep) {
  with_context("while slicing " + tensor_label(t), [&] {
    Dims dims = dims_of(t);
    if (axis < 0 || axis >= static_cast<int>(dims.size()))
      throw_error(ErrorKind::bad_input, "shape " + dims_to_string(dims) + " has no axis " + std::to_string(axis));
    for (size_t i = 0; i < keep.size(); ++i)
      if (keep[i] < 0 || keep[i] >= dims[axis] || (i && keep[i] <= keep[i - 1]))
        throw_error(ErrorKind::bad_input, "kept indices must be ascending and within [0, " + std::to_string(dims[axis]) + ")");
    if (static_cast<int64_t>(keep.size()) == dims[axis]) return;
    ensure_raw(t);
    const size_t es = element_size(t.data_type());
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= dims[i];
    for (size_t i = axis + 1; i < dims.size(); ++i) inner *= dims[i];
    const size_t block = static_cast<size_t>(inner) * es;
    std::string out;
    out.resize(static_cast<size_t>(outer) * keep.size() * block);
    const char* src = t.raw_data().data();
    char* dst = out.data();
    for (int64_t o = 0; o < outer; ++o) {
      const char* base = src + static_cast<size_t>(o * dims[axis]) * block;
      for (int64_t k : keep) {
        std::memcpy(dst, base + static_cast<size_t>(k) * block, block);
        dst += block;
      }
    }
    t.set_raw_data(std::move(out));
    t.set_dims(axis, static_cast<int64_t>(keep.size()));
  });
}

TP make_int64_tensor(const std::string& name, const std::vector<int64_t>& values) {
  TP t;
  t.set_name(name);
  t.set_data_type(TP::INT64);
  t.add_dims(static_cast<int64_t>(values.size()));
  std::string raw(values.size() * 8, '\0');
  std::memcpy(raw.data(), values.data(), raw.size());
  t.set_raw_data(std::move(raw));
  return t;
}

}  // namespace hpcnn::onnxu
