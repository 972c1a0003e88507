#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>

#include "core/error.h"
#include "error_check.h"
#include "onnx/tensor.h"

using namespace hpcnn::onnxu;
using TP = onnx::TensorProto;

namespace {
TP float_tensor(const Dims& dims, bool raw) {
  TP t;
  t.set_name("w");
  t.set_data_type(TP::FLOAT);
  for (auto d : dims) t.add_dims(d);
  const int64_t n = numel(dims);
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i % 7) - 3) * 0.5f;  // signed values
  if (raw) {
    std::string bytes(v.size() * 4, '\0');
    std::memcpy(bytes.data(), v.data(), bytes.size());
    t.set_raw_data(bytes);
  } else {
    for (float x : v) t.add_float_data(x);
  }
  return t;
}
}  // namespace

TEST_CASE("l1_norms_along matches a direct sum for every axis", "[onnx]") {
  const Dims dims{4, 3, 2, 5};
  for (bool raw : {true, false}) {
    TP t = float_tensor(dims, raw);
    auto vals = to_doubles(t);
    for (int axis = 0; axis < 4; ++axis) {
      std::vector<double> expect(static_cast<size_t>(dims[axis]), 0.0);
      for (int a = 0; a < 4; ++a)
        for (int b = 0; b < 3; ++b)
          for (int c = 0; c < 2; ++c)
            for (int d = 0; d < 5; ++d) {
              const int idx[4] = {a, b, c, d};
              expect[idx[axis]] += std::fabs(vals[((a * 3 + b) * 2 + c) * 5 + d]);
            }
      auto got = l1_norms_along(t, axis);
      REQUIRE(got.size() == expect.size());
      for (size_t i = 0; i < got.size(); ++i) CHECK(got[i] == Approx(expect[i]));
    }
  }
}

TEST_CASE("slice_axis keeps the chosen indices in order", "[onnx]") {
  TP t = float_tensor({3, 4, 2}, false);
  auto before = to_doubles(t);
  slice_axis(t, 1, {0, 2, 3});
  REQUIRE(dims_of(t) == Dims{3, 3, 2});
  auto after = to_doubles(t);
  const int64_t keep[3] = {0, 2, 3};
  for (int a = 0; a < 3; ++a)
    for (int k = 0; k < 3; ++k)
      for (int c = 0; c < 2; ++c) CHECK(after[(a * 3 + k) * 2 + c] == before[(a * 4 + keep[k]) * 2 + c]);
}

TEST_CASE("slice_axis rejects unsorted or out-of-range indices", "[onnx]") {
  TP t = float_tensor({4}, true);
  using hpcnn::testing::check_error;
  check_error([&] { slice_axis(t, 0, {2, 1}); }, hpcnn::ErrorKind::bad_input, "ascending");
  check_error([&] { slice_axis(t, 0, {4}); }, hpcnn::ErrorKind::bad_input, "within [0, 4)");
  check_error([&] { slice_axis(t, 1, {0}); }, hpcnn::ErrorKind::bad_input, "no axis 1");
}

TEST_CASE("ensure_raw converts typed fields and checks the size", "[onnx]") {
  TP t;
  t.set_name("s");
  t.set_data_type(TP::INT64);
  t.add_dims(3);
  t.add_int64_data(5);
  t.add_int64_data(-1);
  t.add_int64_data(7);
  ensure_raw(t);
  CHECK(t.int64_data_size() == 0);
  CHECK(to_int64s(t) == std::vector<int64_t>{5, -1, 7});

  TP bad = float_tensor({2, 2}, true);
  bad.mutable_raw_data()->resize(12);
  try {
    ensure_raw(bad);
    FAIL("no error");
  } catch (const hpcnn::Error& e) {
    CHECK(e.kind() == hpcnn::ErrorKind::bad_input);
    CHECK(std::string(e.what()).find("'w'") != std::string::npos);
  }
}

TEST_CASE("float16 values convert exactly", "[onnx]") {
  TP t;
  t.set_name("h");
  t.set_data_type(TP::FLOAT16);
  t.add_dims(4);
  // 1.0, -2.0, 0.5, smallest subnormal 2^-24
  for (int v : {0x3c00, 0xc000, 0x3800, 0x0001}) t.add_int32_data(v);
  auto d = to_doubles(t);
  CHECK(d == std::vector<double>{1.0, -2.0, 0.5, std::ldexp(1.0, -24)});
}

TEST_CASE("numel rejects negative dims", "[onnx]") {
  CHECK(numel(Dims{}) == 1);
  CHECK(numel(Dims{2, 0, 5}) == 0);
  hpcnn::testing::check_error([] { numel(Dims{2, -1}); }, hpcnn::ErrorKind::bad_input, "negative dimension in shape");
}
