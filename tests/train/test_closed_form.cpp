// Closed-form checks of the training services that no other test pins down: the learning-rate
// schedule (scaling, warm-up, cosine, polynomial, constant, resume invariance), the SGD and LARS
// updates (two steps computed by hand in double), and the checkpoint round trip.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numbers>
#include <vector>

#include "core/error.h"
#include "train/checkpoint.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"
#include "train/schedule.h"

using hpcnn::ErrorKind;
using hpcnn::Tensor;
using hpcnn::train::LrSchedule;

namespace {

LrSchedule schedule(const std::string& scaling, double warmup, const std::string& decay) {
  LrSchedule s;
  s.base = 0.1;
  s.base_batch = 256;
  s.scaling = scaling;
  s.warmup_epochs = warmup;
  s.warmup_start = 0.2;
  s.decay = decay;
  s.power = 2.0;
  s.final_lr = 0.001;
  s.validate();
  return s;
}

}  // namespace

TEST_CASE("learning-rate scaling with the global batch", "[train][schedule]") {
  CHECK(schedule("linear", 0, "constant").peak(1024) == Approx(0.4).epsilon(1e-15));
  CHECK(schedule("sqrt", 0, "constant").peak(1024) == Approx(0.2).epsilon(1e-15));
  CHECK(schedule("none", 0, "constant").peak(1024) == Approx(0.1).epsilon(1e-15));
  CHECK(schedule("linear", 0, "constant").peak(64) == Approx(0.025).epsilon(1e-15));
}

TEST_CASE("linear warm-up from warmup_start to the peak", "[train][schedule]") {
  // 2 warm-up epochs of 10 steps: step k (0-based) of the first 20 has lr peak * (0.2 + 0.8 * (k + 1) / 20).
  const LrSchedule s = schedule("linear", 2, "constant");
  const double peak = 0.1 * 512 / 256;
  for (int64_t k = 0; k < 20; ++k)
    CHECK(s.at(k / 10, k % 10, 10, 5, 512) == Approx(peak * (0.2 + 0.8 * static_cast<double>(k + 1) / 20)).epsilon(1e-13));
  CHECK(s.at(2, 0, 10, 5, 512) == Approx(peak).epsilon(1e-15));
  CHECK(s.at(4, 9, 10, 5, 512) == Approx(peak).epsilon(1e-15));
}

TEST_CASE("cosine and polynomial decay after the warm-up", "[train][schedule]") {
  // 1 warm-up epoch, 5 epochs, 8 steps per epoch: decay over epochs [1, 5).
  const double peak = 0.1, fin = 0.001;
  const LrSchedule c = schedule("none", 1, "cosine"), p = schedule("none", 1, "polynomial");
  for (int64_t g = 8; g < 40; ++g) {
    const double t = (static_cast<double>(g) / 8 - 1) / 4;
    CHECK(c.at(g / 8, g % 8, 8, 5, 256) == Approx(fin + (peak - fin) * (1 + std::cos(std::numbers::pi * t)) / 2).epsilon(1e-13));
    CHECK(p.at(g / 8, g % 8, 8, 5, 256) == Approx(fin + (peak - fin) * (1 - t) * (1 - t)).epsilon(1e-13));
  }
  // Halfway through the decay the cosine is at the mean of peak and final.
  CHECK(c.at(3, 0, 8, 5, 256) == Approx((peak + fin) / 2).epsilon(1e-13));
  // Without warm-up the first step is the peak.
  CHECK(schedule("none", 0, "cosine").at(0, 0, 8, 5, 256) == Approx(peak).epsilon(1e-15));
}

TEST_CASE("step decay: the MLPerf CosmoFlow schedule", "[train][schedule]") {
  // Peak 0.001 * 8 / 64 after 4 warm-up epochs; x0.25 from epoch 32, x0.125 from epoch 64.
  LrSchedule s;
  s.base = 0.001;
  s.base_batch = 64;
  s.warmup_epochs = 4;
  s.decay = "step";
  s.step_epochs = {32, 64};
  s.step_factors = {0.25, 0.125};
  s.validate();
  const double peak = 0.001 * 8 / 64;
  CHECK(s.at(3, 9, 10, 128, 8) == Approx(peak).epsilon(1e-15));  // the last warm-up step reaches the peak
  CHECK(s.at(31, 9, 10, 128, 8) == Approx(peak).epsilon(1e-15));
  CHECK(s.at(32, 0, 10, 128, 8) == Approx(peak * 0.25).epsilon(1e-15));
  CHECK(s.at(63, 9, 10, 128, 8) == Approx(peak * 0.25).epsilon(1e-15));
  CHECK(s.at(64, 0, 10, 128, 8) == Approx(peak * 0.125).epsilon(1e-15));
  CHECK(s.at(127, 9, 10, 128, 8) == Approx(peak * 0.125).epsilon(1e-15));
  // Milestones and factors must pair up, increase, and be positive.
  for (auto edit : std::vector<std::function<void(LrSchedule&)>>{
           [](LrSchedule& t) { t.step_factors = {0.25}; }, [](LrSchedule& t) { t.step_epochs = {64, 32}; },
           [](LrSchedule& t) { t.step_factors = {0.25, 0}; }, [](LrSchedule& t) { t.step_epochs = t.step_factors = {}; }}) {
    LrSchedule bad = s;
    edit(bad);
    CHECK_THROWS_AS(bad.validate(), hpcnn::Error);
  }
}

TEST_CASE("the schedule follows the fraction of training done, whatever the steps per epoch", "[train][schedule]") {
  // A run checkpointed after 2 of 4 epochs at 30 steps per epoch and resumed with twice the
  // batch (15 steps per epoch) continues at the same point of the schedule: not at its end.
  const LrSchedule s = schedule("none", 0.5, "cosine");
  for (int64_t e = 1; e < 4; ++e) CHECK(s.at(e, 0, 30, 4, 256) == Approx(s.at(e, 0, 15, 4, 256)).epsilon(1e-15));
  CHECK(s.at(2, 0, 15, 4, 256) > 0.04);
  CHECK(s.at(2, 5, 10, 4, 256) == Approx(s.at(2, 15, 30, 4, 256)).epsilon(1e-15));
}

TEST_CASE("schedule settings are validated naming the key", "[train][schedule]") {
  auto fails = [](auto&& edit, const std::string& key) {
    LrSchedule s;
    edit(s);
    try {
      s.validate();
      FAIL("no error for " << key);
    } catch (const hpcnn::Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      CHECK(e.exit_code() == 1);
      CHECK_THAT(e.what(), Catch::Contains(key));
    }
  };
  fails([](LrSchedule& s) { s.base = 0; }, "lr.base");
  fails([](LrSchedule& s) { s.scaling = "cubic"; }, "lr.scaling");
  fails([](LrSchedule& s) { s.decay = "step"; }, "lr.decay");
  fails([](LrSchedule& s) { s.warmup_start = 1.5; }, "lr.warmup_start");
}

namespace {

std::vector<hpcnn::nn::Parameter> two_params() {
  std::vector<hpcnn::nn::Parameter> p(2);
  p[0].name = "w";
  p[0].value = Tensor::from_values({2, 2}, {0.5f, -1.0f, 2.0f, 0.25f});
  p[0].no_weight_decay = false;
  p[1].name = "b";
  p[1].value = Tensor::from_values({2}, {0.1f, -0.3f});
  p[1].no_weight_decay = true;
  return p;
}

}  // namespace

TEST_CASE("LARS: trust ratio per tensor, momentum on the scaled step, no scaling for BN/bias", "[train][optimizer]") {
  auto params = two_params();
  const auto layout = hpcnn::train::parameter_layout(params, false);
  hpcnn::train::OptimizerOptions o;
  o.type = "lars";
  o.momentum = 0.9f;
  o.weight_decay = 0.01f;
  o.trust_coefficient = 0.02f;
  hpcnn::train::Optimizer opt(o, layout, hpcnn::train::position_tensors(layout, hpcnn::Device::cpu()));
  const std::vector<std::vector<double>> grads = {{0.3, 0.4, -0.1, 0.2, 1.0, -2.0}, {-0.2, 0.1, 0.5, 0.3, 0.4, 0.0}};
  // Reference in double, from the formulas of You, Gitman & Ginsburg (2017), Algorithm 1.
  std::vector<double> w = {0.5, -1.0, 2.0, 0.25, 0.1, -0.3}, v(6, 0.0);
  const double lr = 0.5;
  for (const auto& g : grads) {
    const Tensor fused = Tensor::from_values({6}, std::vector<float>(g.begin(), g.end()));
    opt.step(params, fused, static_cast<float>(lr));
    double wn = 0, gn = 0;
    for (int j = 0; j < 4; ++j) wn += w[j] * w[j], gn += g[j] * g[j];
    wn = std::sqrt(wn), gn = std::sqrt(gn);
    const double local = 0.02 * wn / (gn + 0.01 * wn);
    for (int j = 0; j < 4; ++j) {
      v[j] = 0.9 * v[j] + lr * local * (g[j] + 0.01 * w[j]);
      w[j] -= v[j];
    }
    for (int j = 4; j < 6; ++j) {  // the bias: plain momentum SGD, no decay, no trust ratio
      v[j] = 0.9 * v[j] + g[j];
      w[j] -= lr * v[j];
    }
  }
  for (int j = 0; j < 4; ++j) CHECK(params[0].value.data()[j] == Approx(w[j]).epsilon(1e-5));
  for (int j = 0; j < 2; ++j) CHECK(params[1].value.data()[j] == Approx(w[4 + j]).epsilon(1e-5));
  CHECK(opt.state().data()[0] == Approx(v[0]).epsilon(1e-5));
}

TEST_CASE("SGD with Nesterov momentum and weight decay", "[train][optimizer]") {
  auto params = two_params();
  const auto layout = hpcnn::train::parameter_layout(params, false);
  hpcnn::train::OptimizerOptions o;
  o.momentum = 0.8f;
  o.nesterov = true;
  o.weight_decay = 0.1f;
  hpcnn::train::Optimizer opt(o, layout, hpcnn::train::position_tensors(layout, hpcnn::Device::cpu()));
  std::vector<double> w = {0.5, -1.0, 2.0, 0.25, 0.1, -0.3}, v(6, 0.0);
  const std::vector<double> g = {1.0, -1.0, 0.5, 0.0, 0.25, -0.5};
  for (int it = 0; it < 2; ++it) {
    const Tensor fused = Tensor::from_values({6}, std::vector<float>(g.begin(), g.end()));
    opt.step(params, fused, 0.1f);
    for (int j = 0; j < 6; ++j) {
      const double gj = g[j] + (j < 4 ? 0.1 * w[j] : 0.0);
      v[j] = 0.8 * v[j] + gj;
      w[j] -= 0.1 * (gj + 0.8 * v[j]);
    }
  }
  for (int j = 0; j < 4; ++j) CHECK(params[0].value.data()[j] == Approx(w[j]).epsilon(1e-5));
  for (int j = 0; j < 2; ++j) CHECK(params[1].value.data()[j] == Approx(w[4 + j]).epsilon(1e-5));
}

TEST_CASE("checkpoint round trip and damaged checkpoints", "[train][checkpoint]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("hpcnn_ckpt_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "sub" / "c.ckpt").string();  // a missing folder is created
  hpcnn::train::Checkpoint c;
  c.epoch = 3;
  c.step_in_epoch = 7;
  c.global_step = 97;
  c.world_size = 4;
  c.batch_size = 32;
  c.model.set_ir_version(8);
  c.model.mutable_graph()->set_name("g");
  auto* init = c.model.mutable_graph()->add_initializer();
  init->set_name("w");
  init->add_dims(3);
  for (float f : {1.5f, -2.0f, 0.25f}) init->add_float_data(f);
  c.optimizer_state["w"] = Tensor::from_values({3}, {0.5f, 0.0f, -7.0f});
  c.optimizer_state["conv.weight"] = Tensor::from_values({2, 1, 1, 2}, {1, 2, 3, 4});
  hpcnn::train::write_checkpoint(path, c);
  const auto r = hpcnn::train::read_checkpoint(path);
  CHECK(r.epoch == 3);
  CHECK(r.step_in_epoch == 7);
  CHECK(r.global_step == 97);
  CHECK(r.world_size == 4);
  CHECK(r.batch_size == 32);
  CHECK(r.model.SerializeAsString() == c.model.SerializeAsString());
  REQUIRE(r.optimizer_state.size() == 2);
  for (const auto& [name, t] : c.optimizer_state) {
    const Tensor& got = r.optimizer_state.at(name);
    REQUIRE(got.shape() == t.shape());
    for (int64_t i = 0; i < t.numel(); ++i) CHECK(got.data()[i] == t.data()[i]);
  }

  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string bad = (dir / "bad.ckpt").string();
  for (const std::string& damaged :
       {std::string(), bytes.substr(0, bytes.size() / 2), bytes.substr(0, 19), "XXXXXXXX" + bytes.substr(8)}) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << damaged;
    try {
      hpcnn::train::read_checkpoint(bad);
      FAIL("a damaged checkpoint of " << damaged.size() << " bytes was read");
    } catch (const hpcnn::Error& e) {
      CHECK(e.kind() == ErrorKind::bad_input);
      CHECK(e.exit_code() == 2);
      CHECK_THAT(e.what(), Catch::Contains("bad.ckpt") && Catch::Contains("byte offset"));
    }
  }
  fs::remove_all(dir);
}
