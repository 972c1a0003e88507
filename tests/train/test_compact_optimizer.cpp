// The compact optimizer state of a pruned model (issue 45 item 3; Singh & Bhatele, IPDPS 2023):
// the exchange and the optimizer keep the fused gradients, the momentum / LARS velocity and the
// positions only for the weights that survive pruning, and must equal a dense masked optimizer:
// dense momentum over every entry, the gradient multiplied by the mask, the weights re-masked
// after each step. The reference below is written here, in double, over dense tensors; it shares
// no code with lib/train or lib/ops. Also: the bytes parameter_memory() counts equal their closed
// form (dense and compact). The checkpoint round trip of the compact state: tests/cli/test_compact_state.py.
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"
#include "train/parameter_memory.h"

using hpcnn::Shape;
using hpcnn::Tensor;
namespace train = hpcnn::train;

namespace {

struct Case {
  std::vector<hpcnn::nn::Parameter> params;
  std::vector<std::vector<double>> mask;  // 1 kept, 0 pruned (all ones for rank < 2)
};

// A conv weight with 80% zeros, a Gemm weight with 90% zeros, a bias and a BatchNormalization scale.
Case make_case(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.5f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Case c;
  const std::vector<std::pair<Shape, double>> specs{{{8, 4, 3, 3}, 0.8}, {{10, 32}, 0.9}, {{8}, 0.0}, {{10}, 0.0}};
  for (size_t k = 0; k < specs.size(); ++k) {
    const auto& [shape, zeros] = specs[k];
    Tensor w = Tensor::zeros(shape);
    std::vector<double> m(static_cast<size_t>(w.numel()), 1.0);
    for (int64_t i = 0; i < w.numel(); ++i) {
      w.data()[i] = nd(rng) + (nd(rng) > 0 ? 0.1f : -0.1f);  // never exactly zero
      if (shape.size() >= 2 && u(rng) < zeros) {
        w.data()[i] = 0.0f;
        m[static_cast<size_t>(i)] = 0.0;
      }
    }
    c.params.push_back({"p" + std::to_string(k), w, Tensor::zeros(shape), shape.size() < 2});
    c.mask.push_back(m);
  }
  return c;
}

// The dense masked reference: one step over every entry, in double.
void reference_step(std::vector<std::vector<double>>& w, std::vector<std::vector<double>>& v,
                    const std::vector<std::vector<double>>& g, const Case& c, const train::OptimizerOptions& o, double lr) {
  for (size_t k = 0; k < w.size(); ++k) {
    const auto& m = c.mask[k];
    const bool decay = !(o.weight_decay_skip_bn_bias && c.params[k].no_weight_decay);
    const double wd = decay ? o.weight_decay : 0.0;
    std::vector<double> gm(w[k].size());
    for (size_t i = 0; i < gm.size(); ++i) gm[i] = g[k][i] * m[i];
    if (o.type == "lars" && decay) {
      double wn = 0, gn = 0;
      for (size_t i = 0; i < gm.size(); ++i) wn += w[k][i] * w[k][i], gn += gm[i] * gm[i];
      wn = std::sqrt(wn), gn = std::sqrt(gn);
      const double local = wn > 0 && gn > 0 ? o.trust_coefficient * wn / (gn + wd * wn) : 1.0;
      for (size_t i = 0; i < gm.size(); ++i) {
        v[k][i] = o.momentum * v[k][i] + lr * local * (gm[i] + wd * w[k][i]);
        w[k][i] = (w[k][i] - v[k][i]) * m[i];
      }
    } else {
      for (size_t i = 0; i < gm.size(); ++i) {
        const double gi = gm[i] + wd * w[k][i];
        v[k][i] = o.momentum * v[k][i] + gi;
        w[k][i] = (w[k][i] - lr * (o.nesterov ? gi + o.momentum * v[k][i] : v[k][i])) * m[i];
      }
    }
  }
}

void check_compact_equals_dense(const train::OptimizerOptions& o, bool with_mask_model) {
  Case c = make_case(11);
  auto comm = hpcnn::dist::make_single_communicator();
  std::vector<Tensor> masks;  // the mask model's form: the same zeros, given apart from the weights
  for (size_t k = 0; k < c.params.size(); ++k) {
    Tensor t = Tensor::zeros(c.params[k].value.shape());
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = static_cast<float>(c.mask[k][static_cast<size_t>(i)]);
    masks.push_back(t);
  }
  hpcnn::dist::FusedLayout layout = train::parameter_layout(c.params, true, with_mask_model ? &masks : nullptr);
  size_t kept = 0, full = 0;
  for (const auto& m : c.mask)
    for (double x : m) kept += x != 0.0, ++full;
  REQUIRE(layout.total == kept);
  REQUIRE(layout.full == full);
  train::GradientExchange ex(*comm, layout);
  train::Optimizer opt(o, ex.layout(), ex.positions());
  REQUIRE(static_cast<size_t>(opt.state().numel()) == kept);  // the state exists for the kept entries only

  std::vector<std::vector<double>> w, v, g(c.params.size());
  for (const auto& p : c.params) {
    w.emplace_back(p.value.data(), p.value.data() + p.value.numel());
    v.emplace_back(static_cast<size_t>(p.value.numel()), 0.0);
  }
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const double lr = 0.05;
  for (int step = 0; step < 5; ++step) {
    for (size_t k = 0; k < c.params.size(); ++k) {  // gradients everywhere, pruned entries included
      Tensor& gr = c.params[k].grad;
      g[k].resize(static_cast<size_t>(gr.numel()));
      for (int64_t i = 0; i < gr.numel(); ++i) g[k][static_cast<size_t>(i)] = gr.data()[i] = nd(rng);
    }
    ex.exchange(c.params, 1);
    opt.step(c.params, ex.fused(), static_cast<float>(lr));
    reference_step(w, v, g, c, o, lr);
  }
  const hpcnn::Tensor state = opt.state();
  for (size_t k = 0; k < c.params.size(); ++k) {
    const float* got = c.params[k].value.data();
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < w[k].size(); ++i) {
      max_ref = std::max(max_ref, std::abs(w[k][i]));
      max_diff = std::max(max_diff, std::abs(got[i] - w[k][i]));
      if (c.mask[k][i] == 0.0) REQUIRE(got[i] == 0.0f);  // exactly zero, weight decay notwithstanding
    }
    INFO("parameter " << c.params[k].name << ": max |w - reference| " << max_diff << ", max |reference| " << max_ref);
    CHECK(max_diff <= 1e-6 * max_ref);
    // The velocity: entry j of the compact state is the dense reference's at the j-th kept position.
    double vmax = 0, vdiff = 0;
    size_t j = static_cast<size_t>(ex.layout().offset[k]);
    for (size_t i = 0; i < v[k].size(); ++i) {
      vmax = std::max(vmax, std::abs(v[k][i]));
      if (c.mask[k][i] != 0.0) vdiff = std::max(vdiff, std::abs(state.data()[j++] - v[k][i]));
      else REQUIRE(v[k][i] == 0.0);  // the reference's momentum at a pruned entry stays zero too
    }
    INFO("velocity of " << c.params[k].name << ": max diff " << vdiff << ", max " << vmax);
    CHECK(vdiff <= 1e-6 * vmax);
    CHECK(j == ex.layout().offset[k] + ex.layout().count(k));
  }
}

}  // namespace

TEST_CASE("compact SGD momentum equals the dense masked optimizer (zeros of the weights as the mask)", "[train][compact]") {
  train::OptimizerOptions o;
  o.weight_decay = 5e-3f;
  check_compact_equals_dense(o, false);
  o.nesterov = true;
  check_compact_equals_dense(o, false);
}

TEST_CASE("compact LARS equals the dense masked optimizer (a mask model)", "[train][compact]") {
  train::OptimizerOptions o;
  o.type = "lars";
  o.weight_decay = 5e-3f;
  o.trust_coefficient = 0.02f;
  check_compact_equals_dense(o, true);
  check_compact_equals_dense(o, false);
}

TEST_CASE("parameter memory: the bytes counted equal the closed form, dense and compact", "[train][compact]") {
  auto comm = hpcnn::dist::make_single_communicator();
  for (bool sparse : {false, true}) {
    Case c = make_case(3);
    size_t full = 0, kept = 0, dense_elems = 0;
    for (size_t k = 0; k < c.params.size(); ++k) {
      full += c.mask[k].size();
      for (double x : c.mask[k]) kept += x != 0.0;
      if (c.params[k].value.rank() < 2) dense_elems += c.mask[k].size();
    }
    train::GradientExchange ex(*comm, train::parameter_layout(c.params, sparse));
    train::Optimizer opt(train::OptimizerOptions{}, ex.layout(), ex.positions());
    const train::ParameterMemory m = train::parameter_memory(c.params, ex, opt);
    const size_t T = sparse ? kept : full;
    CHECK(m.weights == 4 * full);
    CHECK(m.gradients == 4 * full);
    CHECK(m.fused == 4 * T);
    CHECK(m.state == 4 * T);
    CHECK(m.positions == (sparse ? 4 * (kept - dense_elems) : 0));  // i32, one copy
    CHECK(m.optimizer() == m.fused + m.state + m.positions);
    for (const auto& pos : ex.layout().positions) CHECK(pos.empty());  // moved onto the device, not duplicated
    if (sparse) {  // so the host copies refuse the layout instead of copying nothing
      std::vector<float> buf(c.mask[0].size()), fused(ex.layout().total);
      try {
        hpcnn::dist::pack(ex.layout(), 0, buf.data(), fused.data());
        FAIL("pack used a layout whose positions were moved");
      } catch (const hpcnn::Error& e) {
        CHECK(e.kind() == hpcnn::ErrorKind::usage);
        CHECK_THAT(e.what(), Catch::Contains("positions of sparse buffer 0 were moved"));
      }
    }
  }
}
