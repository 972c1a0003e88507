// nn::evaluate against an independent computation from the PyTorch fixture: top-1/top-5 and
// the mean cross-entropy from the eval-mode logits PyTorch computed, with batch sizes that do
// and do not divide the sample count.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/npy.h"
#include "error_check.h"
#include "nn/evaluate.h"
#include "onnx/model.h"

using namespace hpcnn;

TEST_CASE("evaluate matches top-k and loss from reference logits", "[nn]") {
  const std::filesystem::path dir = std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / "fmnist_cnn";
  nn::Model model = nn::Model::load((dir / "model.onnx").string());
  Tensor images = data::npy_to_tensor(data::read_npy((dir / "input.npy").string()));
  std::vector<int32_t> labels = data::npy_to_labels(data::read_npy((dir / "labels.npy").string()));
  Tensor logits = data::npy_to_tensor(data::read_npy((dir / "eval_logits.npy").string()));
  const int64_t N = logits.dim(0), K = logits.dim(1);
  REQUIRE(static_cast<int64_t>(labels.size()) == N);
  // Reference: rank of the label's logit and log-softmax in double.
  double top1 = 0, top5 = 0, loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    const float* z = logits.data() + n * K;
    int greater = 0;
    for (int64_t k = 0; k < K; ++k) greater += z[k] > z[labels[n]];
    top1 += greater == 0;
    top5 += greater < 5;
    double mx = *std::max_element(z, z + K), s = 0;
    for (int64_t k = 0; k < K; ++k) s += std::exp(z[k] - mx);
    loss += mx + std::log(s) - z[labels[n]];
  }
  for (int batch : {1, 3, 64}) {
    nn::EvalResult r = nn::evaluate(model, images, labels, batch);
    CHECK(r.samples == N);
    CHECK(r.top1 == Approx(top1 / N));
    CHECK(r.top5 == Approx(top5 / N));
    CHECK(r.mean_loss == Approx(loss / N).epsilon(1e-4));
  }
  std::vector<int32_t> bad = labels;
  bad[1] = static_cast<int32_t>(K);
  hpcnn::testing::check_error([&] { nn::evaluate(model, images, bad, 2); }, hpcnn::ErrorKind::bad_input,
                              "label " + std::to_string(K) + " of sample 1");
  hpcnn::testing::check_error([&] { nn::evaluate(model, images, std::span<const int32_t>(labels).subspan(1), 2); },
                              hpcnn::ErrorKind::bad_input, " labels for ");
  hpcnn::testing::check_error([&] { nn::evaluate(model, images, labels, 0); }, hpcnn::ErrorKind::usage, "batch size");
}

TEST_CASE("mean squared error and MAE per target against the closed form", "[nn][regression]") {
  // Predictions and targets [3, 2]: errors e = p - t.
  Tensor p({3, 2}), t({3, 2});
  const float pv[] = {0.5f, -1.0f, 0.25f, 0.0f, 1.0f, 2.0f}, tv[] = {0.0f, -0.5f, 0.25f, 1.0f, -1.0f, 2.5f};
  std::copy(pv, pv + 6, p.data());
  std::copy(tv, tv + 6, t.data());
  const double e[] = {0.5, -0.5, 0.0, -1.0, 2.0, -0.5};
  double sq = 0, ab = 0;
  for (double v : e) sq += v * v, ab += std::abs(v);
  Tensor g;
  const nn::RegressionLoss l = nn::mean_squared_error(p, t, &g);
  CHECK(l.mse == Approx(sq / 6).epsilon(1e-12));
  CHECK(l.sums.absolute_error == Approx(ab).epsilon(1e-12));
  CHECK(l.sums.absolute_error_per_target[0] == Approx(0.5 + 0.0 + 2.0).epsilon(1e-12));
  CHECK(l.sums.absolute_error_per_target[1] == Approx(0.5 + 1.0 + 0.5).epsilon(1e-12));
  for (int i = 0; i < 6; ++i) CHECK(g.data()[i] == Approx(2 * e[i] / 6).epsilon(1e-6));
  // Sums add over batches; the result divides by samples (per target) and values (overall).
  nn::EvalSums sums;
  sums.regression = l.sums;
  sums.count = 3;
  const nn::EvalResult r = nn::eval_result(nn::EvalSums::from_flat(sums.flat(2), 2));
  CHECK(r.targets == 2);
  CHECK(r.mae == Approx(ab / 6).epsilon(1e-12));
  CHECK(r.mse == Approx(sq / 6).epsilon(1e-12));
  CHECK(r.mae_per_target[0] == Approx(2.5 / 3).epsilon(1e-12));
  // Shapes that disagree are refused, naming both.
  Tensor wide({3, 3});
  CHECK_THROWS_WITH(nn::mean_squared_error(wide, t, nullptr), Catch::Contains("[3,3]") && Catch::Contains("[3,2]"));
}
