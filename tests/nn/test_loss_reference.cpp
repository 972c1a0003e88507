// nn/loss.h against closed forms and values computed with numpy in float64:
//   t = (1 - e) onehot(y) + e / K,  loss = mean_n [logsumexp(z_n) - sum_k t_nk z_nk],
//   d loss / d z = (softmax(z) - t) / N.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "nn/loss.h"

using hpcnn::Error;
using hpcnn::ErrorKind;
using hpcnn::Tensor;
using hpcnn::nn::softmax_cross_entropy;

namespace {

void check_close(const Tensor& got, const std::vector<double>& want) {
  REQUIRE(got.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("element " << i);
    CHECK(std::fabs(got.data()[i] - want[i]) <= 1e-7 + 1e-6 * std::fabs(want[i]));
  }
}

std::string error_of(const Tensor& logits, const std::vector<int32_t>& labels) {
  try {
    Tensor g;
    softmax_cross_entropy(logits, labels, 0.1f, &g);
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::bad_input);
    return e.what();
  }
  FAIL("no hpcnn::Error thrown");
  return {};
}

}  // namespace

TEST_CASE("softmax_cross_entropy with label smoothing matches numpy values", "[nn][loss]") {
  const Tensor z = Tensor::from_values({2, 3}, {2.0f, 1.0f, 0.1f, 0.5f, 2.5f, -1.0f});
  Tensor g;
  // numpy, float64: labels [0, 1], e = 0.1
  auto r = softmax_cross_entropy(z, std::vector<int32_t>{0, 1}, 0.1f, &g);
  CHECK(r.loss == Approx(0.4251041117000608).epsilon(1e-6));
  REQUIRE(g.shape() == hpcnn::Shape{2, 3});
  check_close(g, {-0.13716609722368284, 0.10454981868569026, 0.03261627853799241, 0.04139060067040391, -0.03767826136243807,
                  -0.0037123393079659048});
  CHECK(r.correct1 == 2);
  CHECK(r.correct5 == 2);

  // e = 0 is plain cross-entropy: labels [2, 0] are both wrong at top-1.
  r = softmax_cross_entropy(z, std::vector<int32_t>{2, 0}, 0.0f, &g);
  CHECK(r.loss == Approx(2.235104111700061).epsilon(1e-6));
  check_close(g, {0.32950056944298384, 0.12121648535235692, -0.4507170547953409, -0.44194273266292944, 0.4289884053042286,
                  0.012954327358700762});
  CHECK(r.correct1 == 0);
  CHECK(r.correct5 == 2);  // K = 3 < 5: every label is in the top 5
  // Without e: -log softmax(z)[y], directly.
  const double l0 = std::log(std::exp(2.0) + std::exp(1.0) + std::exp(0.1)) - 0.1;
  const double l1 = std::log(std::exp(0.5) + std::exp(2.5) + std::exp(-1.0)) - 0.5;
  CHECK(r.loss == Approx((l0 + l1) / 2).epsilon(1e-6));

  // No gradient asked for: same loss.
  CHECK(softmax_cross_entropy(z, std::vector<int32_t>{2, 0}, 0.0f, nullptr).loss == Approx(r.loss).epsilon(1e-12));
}

TEST_CASE("softmax_cross_entropy closed forms: uniform logits, huge logits, top-5", "[nn][loss]") {
  // Equal logits: softmax is uniform, the loss is log K whatever the label and e (t sums to 1),
  // and the gradient is (1/K - t) / N.
  const int K = 7;
  const Tensor z = Tensor::full({3, K}, 0.25f);
  Tensor g;
  for (float e : {0.0f, 0.1f, 0.5f}) {
    auto r = softmax_cross_entropy(z, std::vector<int32_t>{0, 3, 6}, e, &g);
    CHECK(r.loss == Approx(std::log(static_cast<double>(K))).epsilon(1e-6));
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < K; ++k) {
        const int label = n == 0 ? 0 : n == 1 ? 3 : 6;
        const double t = (k == label ? 1.0 - e : 0.0) + e / K;
        CHECK(g.data()[n * K + k] == Approx((1.0 / K - t) / 3).margin(1e-7));
      }
  }

  // Logits far apart stay finite (log-sum-exp shift): loss = lse - t.z = 1000 + 900 = 1900.
  const Tensor big = Tensor::from_values({1, 3}, {1000.0f, 0.0f, -1000.0f});
  auto r = softmax_cross_entropy(big, std::vector<int32_t>{2}, 0.1f, &g);
  CHECK(std::isfinite(r.loss));
  CHECK(r.loss == Approx(1900.0).epsilon(1e-6));
  check_close(g, {0.9666666666666667, -0.03333333333333333, -0.9333333333333333});

  // Top-1 / top-5 counts with K = 10 (no ties).
  std::vector<float> v(20);
  for (int k = 0; k < 10; ++k) {
    v[k] = static_cast<float>(k);            // sample 0: class 9 largest, class 4 is 6th
    v[10 + k] = static_cast<float>(10 - k);  // sample 1: class 0 largest, class 4 is 5th
  }
  const Tensor z10 = Tensor::from_values({2, 10}, v);
  r = softmax_cross_entropy(z10, std::vector<int32_t>{4, 4}, 0.0f, nullptr);
  CHECK(r.correct1 == 0);
  CHECK(r.correct5 == 1);
  r = softmax_cross_entropy(z10, std::vector<int32_t>{9, 0}, 0.0f, nullptr);
  CHECK(r.correct1 == 2);
  CHECK(r.correct5 == 2);
}

TEST_CASE("softmax_cross_entropy gradient matches central differences of the loss", "[nn][loss]") {
  const std::vector<float> v = {0.3f, -1.2f, 2.0f, 0.7f, 1.1f, 0.0f, -0.4f, 0.9f, -2.0f, 0.5f, 1.5f, -0.6f};
  const std::vector<int32_t> labels = {2, 0, 3};
  const Tensor z = Tensor::from_values({3, 4}, v);
  Tensor g;
  softmax_cross_entropy(z, labels, 0.2f, &g);
  const float h = 1e-2f;
  for (size_t i = 0; i < v.size(); ++i) {
    std::vector<float> p = v, m = v;
    p[i] += h;
    m[i] -= h;
    const double lp = softmax_cross_entropy(Tensor::from_values({3, 4}, p), labels, 0.2f, nullptr).loss;
    const double lm = softmax_cross_entropy(Tensor::from_values({3, 4}, m), labels, 0.2f, nullptr).loss;
    INFO("logit " << i);
    CHECK(g.data()[i] == Approx((lp - lm) / (2.0 * h)).margin(1e-4));
  }
}

TEST_CASE("softmax_cross_entropy rejects bad labels and shapes", "[nn][loss]") {
  const Tensor z = Tensor::from_values({2, 3}, {2.0f, 1.0f, 0.1f, 0.5f, 2.5f, -1.0f});
  CHECK_THAT(error_of(z, {0, 3}), Catch::Contains("sample 1") && Catch::Contains("3"));
  CHECK_THAT(error_of(z, {-1, 0}), Catch::Contains("sample 0") && Catch::Contains("-1"));
  error_of(z, {0});  // label count != N
  error_of(z, {0, 1, 2});
  error_of(Tensor::from_values({6}, {1, 2, 3, 4, 5, 6}), {0, 1});  // not 2-D
  error_of(Tensor::zeros({2, 3, 1}), {0, 1});
}
