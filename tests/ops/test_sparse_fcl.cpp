// The sparse FCL op (ops/sparse_fcl.h) against its definition computed in double with plain loops,
// and its backward against central finite differences of that definition.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

#include "ops/kernels.h"

using namespace hpcnn;
using namespace hpcnn::ops;

namespace {

constexpr int64_t N = 3, C = 5, H = 4, W = 3, HW = H * W, R = 2, O = 4;

std::vector<double> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

Tensor tensor(const Shape& s, const std::vector<double>& v) {
  Tensor t(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(v[static_cast<size_t>(i)]);
  return t;
}

struct Params {
  std::vector<double> x = random_values(N * C * HW, 1), A = random_values(R * C, 2), a = random_values(R, 3),
                      B = random_values(O * R * HW, 4), b = random_values(O, 5), gy = random_values(N * O, 6);
};

// y[n, o] from the definition (x plain NCHW).
std::vector<double> reference(const Params& p) {
  std::vector<double> y(N * O);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o) {
      double s = p.b[o];
      for (int64_t k = 0; k < R; ++k)
        for (int64_t q = 0; q < HW; ++q) {
          double z = p.a[k];
          for (int64_t c = 0; c < C; ++c) z += p.A[k * C + c] * p.x[(n * C + c) * HW + q];
          s += p.B[o * R * HW + k * HW + q] * z;
        }
      y[n * O + o] = s;
    }
  return y;
}

double loss(const Params& p) {  // sum y * gy: its gradient is the backward of gy
  const auto y = reference(p);
  double l = 0;
  for (size_t i = 0; i < y.size(); ++i) l += y[i] * p.gy[i];
  return l;
}

void check_gradient(Params p, std::vector<double> Params::*field, const Tensor& got, const char* what) {
  const auto& v = p.*field;
  for (size_t i = 0; i < v.size(); i += 1 + v.size() / 17) {  // a spread of entries
    const double h = 1e-4, keep = (p.*field)[i];
    (p.*field)[i] = keep + h;
    const double up = loss(p);
    (p.*field)[i] = keep - h;
    const double down = loss(p);
    (p.*field)[i] = keep;
    const double fd = (up - down) / (2 * h);
    INFO(what << "[" << i << "]");
    REQUIRE(got.data()[i] == Approx(fd).epsilon(1e-4).margin(1e-4));
  }
}

}  // namespace

TEST_CASE("sparse FCL forward matches its definition; backward matches finite differences", "[ops][sparse_fcl]") {
  const Params p;
  for (Layout layout : {Layout::plain, Layout::nhwc}) {
    const Tensor x = to_layout(tensor({N, C, H, W}, p.x), layout);
    const Tensor A = tensor({R, C, 1, 1}, p.A), a = tensor({R}, p.a), B = tensor({O, R * HW}, p.B), b = tensor({O}, p.b);
    SparseFclSaved saved;
    const Tensor y = sparse_fcl_forward(x, A, a, B, b, &saved);
    const auto ref = reference(p);
    REQUIRE(y.shape() == Shape{N, O});
    for (int64_t i = 0; i < N * O; ++i) REQUIRE(y.data()[i] == Approx(ref[static_cast<size_t>(i)]).epsilon(1e-5).margin(1e-5));
    Tensor gx, gA, ga, gB, gb;
    sparse_fcl_backward(x, A, B, saved, tensor({N, O}, p.gy), &gx, &gA, &ga, &gB, &gb);
    REQUIRE(gx.shape() == x.shape());
    REQUIRE(gA.shape() == A.shape());
    check_gradient(p, &Params::x, to_layout(gx, Layout::plain), "gx");
    check_gradient(p, &Params::A, gA, "gA");
    check_gradient(p, &Params::a, ga, "ga");
    check_gradient(p, &Params::B, gB, "gB");
    check_gradient(p, &Params::b, gb, "gb");
  }
  // Undefined biases are zeros.
  Params q = p;
  std::fill(q.a.begin(), q.a.end(), 0.0);
  std::fill(q.b.begin(), q.b.end(), 0.0);
  const Tensor y =
      sparse_fcl_forward(tensor({N, C, H, W}, p.x), tensor({R, C}, p.A), Tensor(), tensor({O, R * HW}, p.B), Tensor(), nullptr);
  const auto ref = reference(q);
  for (int64_t i = 0; i < N * O; ++i) REQUIRE(y.data()[i] == Approx(ref[static_cast<size_t>(i)]).epsilon(1e-5).margin(1e-5));
}

TEST_CASE("sparse FCL rejects inconsistent shapes", "[ops][sparse_fcl]") {
  const Tensor x = Tensor::zeros({N, C, H, W});
  REQUIRE_THROWS_WITH(sparse_fcl_forward(x, Tensor::zeros({R, C + 1}), Tensor(), Tensor::zeros({O, R * HW}), Tensor(), nullptr),
                      Catch::Contains("input channels"));
  REQUIRE_THROWS_WITH(sparse_fcl_forward(x, Tensor::zeros({R, C}), Tensor(), Tensor::zeros({O, R * HW + 1}), Tensor(), nullptr),
                      Catch::Contains("reduced features"));
  REQUIRE_THROWS_WITH(sparse_fcl_forward(Tensor::zeros({N, C * HW}), Tensor::zeros({R, C}), Tensor(), Tensor::zeros({O, R * HW}),
                                         Tensor(), nullptr),
                      Catch::Contains("[N, C, H, W]"));
}
