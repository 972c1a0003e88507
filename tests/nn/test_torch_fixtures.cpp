// Whole small models against PyTorch: tests/data/nn/<model>/ holds an ONNX export (training
// mode, BatchNormalization kept, initializers named as the torch state_dict), a fixed batch and
// torch's results computed in float64 (tests/fixtures/make_torch_fixtures.py; manifest.json lists the
// files). cosmoflow_tiny (a 5-D CosmoFlow-like 3-D CNN) has the same files, its reference
// computed without torch: a float64 NumPy forward and float64 finite differences for every
// gradient (tests/fixtures/make_cosmoflow_fixture.py). For each model: inference-mode logits, training-mode logits, the
// label-smoothed loss and its gradient, every parameter gradient, the input gradient and the BatchNorm running statistics after
// the training forward. Tolerance: |got - want| <= 1e-5 + 1e-4 |want|.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "data/npy.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "onnx/model.h"

#ifndef HPCNN_TEST_DATA_DIR
#error "HPCNN_TEST_DATA_DIR must name tests/data"
#endif

namespace fs = std::filesystem;
using hpcnn::Layout;
using hpcnn::Shape;
using hpcnn::Tensor;
using json = nlohmann::json;

namespace {

constexpr double kAtol = 1e-5, kRtol = 1e-4;

struct Comparison {
  bool shape_ok = true;
  double max_abs = 0, max_rel = 0, worst_ratio = 0;  // ratio = |a-b| / (atol + rtol |b|); pass iff <= 1
  int64_t worst_index = -1;
  double worst_got = 0, worst_want = 0;
  int64_t failing = 0;
  std::string text;
  bool ok() const { return shape_ok && worst_ratio <= 1.0; }
};

Comparison compare(const std::string& what, const Tensor& got_in, const Tensor& want, double scale = 1.0) {
  Comparison c;
  std::ostringstream os;
  os << what;
  if (!got_in.defined()) {
    c.shape_ok = false;
    c.text = what + ": undefined tensor (want shape " + hpcnn::shape_to_string(want.shape()) + ")";
    return c;
  }
  const Tensor got = hpcnn::to_layout(got_in, Layout::plain);
  if (got.shape() != want.shape()) {
    c.shape_ok = false;
    c.text = what + ": shape " + hpcnn::shape_to_string(got.shape()) + ", want " + hpcnn::shape_to_string(want.shape());
    return c;
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double a = got.data()[i], b = scale * want.data()[i];
    const double d = std::fabs(a - b);
    const double ratio = std::isnan(a) ? INFINITY : d / (kAtol + kRtol * std::fabs(b));
    c.max_abs = std::max(c.max_abs, d);
    if (b != 0) c.max_rel = std::max(c.max_rel, d / std::fabs(b));
    if (ratio > 1.0) ++c.failing;
    if (ratio > c.worst_ratio || c.worst_index < 0) {
      c.worst_ratio = ratio;
      c.worst_index = i;
      c.worst_got = a;
      c.worst_want = b;
    }
  }
  char buf[320];
  std::snprintf(buf, sizeof buf,
                " %s: max abs err %.3g, max rel err %.3g, worst err/tol %.3g at flat index %lld (got %.9g, want %.9g), "
                "%lld of %lld elements out of tolerance",
                hpcnn::shape_to_string(want.shape()).c_str(), c.max_abs, c.max_rel, c.worst_ratio,
                static_cast<long long>(c.worst_index), c.worst_got, c.worst_want, static_cast<long long>(c.failing),
                static_cast<long long>(want.numel()));
  c.text = what + buf;
  return c;
}

// Prints each comparison (visible with `unit_tests -s` or on failure) and checks it.
#define CHECK_MATCH(cmp)          \
  do {                            \
    const Comparison& c_ = (cmp); \
    INFO(c_.text);                \
    CHECK(c_.ok());               \
  } while (0)

struct Fixture {
  std::string name;
  fs::path dir;
  json manifest;

  explicit Fixture(const std::string& n) : name(n), dir(fs::path(HPCNN_TEST_DATA_DIR) / "nn" / n) {
    std::ifstream in(dir / "manifest.json");
    REQUIRE(in);
    manifest = json::parse(in);
  }
  Tensor tensor(const json& entry) const {
    Tensor t = hpcnn::data::npy_to_tensor(hpcnn::data::read_npy((dir / entry.at("file").get<std::string>()).string()));
    REQUIRE(t.shape() == entry.at("shape").get<Shape>());
    return t;
  }
  Tensor tensor(const char* key) const { return tensor(manifest.at(key)); }
  std::vector<int32_t> labels() const {
    return hpcnn::data::npy_to_labels(
        hpcnn::data::read_npy((dir / manifest.at("labels").at("file").get<std::string>()).string()));
  }
};

std::string set_difference_text(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string s;
  for (const auto& x : a)
    if (!b.count(x)) s += (s.empty() ? "" : ", ") + x;
  return s.empty() ? "(none)" : s;
}

void run_fixture(const std::string& name) {
  const Fixture fx(name);
  const json& man = fx.manifest;
  INFO("fixture " << name << " (" << man.at("description").get<std::string>() << ")");

  hpcnn::onnxu::Model onnx_model = hpcnn::onnxu::load_model(fx.dir / man.at("model").get<std::string>());
  hpcnn::nn::ModelOptions options;
  options.input_grads = true;
  hpcnn::nn::Model model(onnx_model.proto, onnx_model.path.string(), options);
  INFO("engine summary: " << model.summary());

  CHECK(model.input_names() == std::vector<std::string>{man.at("input_name").get<std::string>()});
  CHECK(model.output_names() == std::vector<std::string>{man.at("output_name").get<std::string>()});

  // The engine finds exactly torch's parameters and BatchNorm buffers.
  std::set<std::string> want_params, want_buffers, got_params, got_buffers;
  for (const auto& p : man.at("parameters")) want_params.insert(p.at("name").get<std::string>());
  for (const auto& b : man.at("buffers")) want_buffers.insert(b.at("name").get<std::string>());
  for (const auto& p : model.parameters()) got_params.insert(p.name);
  for (const auto& b : model.buffers()) got_buffers.insert(b.name);
  {
    INFO("parameters missing in the engine: " << set_difference_text(want_params, got_params)
                                              << "; extra: " << set_difference_text(got_params, want_params));
    CHECK(got_params == want_params);
  }
  {
    INFO("buffers missing in the engine: " << set_difference_text(want_buffers, got_buffers)
                                           << "; extra: " << set_difference_text(got_buffers, want_buffers));
    CHECK(got_buffers == want_buffers);
  }
  for (const auto& p : model.parameters()) {
    INFO("parameter " << p.name);
    CHECK(p.value.defined());
  }

  const Tensor x = fx.tensor("input");
  const std::vector<int32_t> labels = fx.labels();
  const float smoothing = man.at("label_smoothing").get<float>();

  // Buffers before anything runs (the exported running statistics).
  std::map<std::string, Tensor> initial_buffers;
  for (const auto& b : model.buffers()) initial_buffers[b.name] = b.value.clone();

  SECTION("inference and training forward, loss, gradients, running statistics") {
    // ---- inference: running statistics, buffers untouched
    std::vector<Tensor> eval_out = model.forward({x}, hpcnn::nn::Mode::inference);
    REQUIRE(eval_out.size() == 1);
    CHECK_MATCH(compare(name + ": eval-mode logits", eval_out[0], fx.tensor("eval_logits")));
    for (const auto& b : model.buffers()) {
      INFO("buffer " << b.name << " must not change in inference mode");
      CHECK(compare(b.name, b.value, initial_buffers.at(b.name)).max_abs == 0.0);
    }

    // ---- training forward
    std::vector<Tensor> out = model.forward({x}, hpcnn::nn::Mode::training);
    REQUIRE(out.size() == 1);
    CHECK_MATCH(compare(name + ": training-mode logits", out[0], fx.tensor("train_logits")));

    // ---- loss and its gradient
    Tensor dlogits;
    const auto loss = hpcnn::nn::softmax_cross_entropy(out[0], labels, smoothing, &dlogits);
    const double want_loss = man.at("loss").at("value").get<double>();
    {
      INFO(name << ": loss " << loss.loss << ", want " << want_loss << ", |diff| " << std::fabs(loss.loss - want_loss));
      CHECK(std::fabs(loss.loss - want_loss) <= kAtol + kRtol * std::fabs(want_loss));
    }
    CHECK_MATCH(compare(name + ": d loss / d logits", dlogits, fx.tensor("logits_grad")));

    // ---- backward: parameter gradients and the input gradient
    model.zero_grad();
    model.backward({dlogits});
    std::map<std::string, const hpcnn::nn::Parameter*> by_name;
    for (const auto& p : model.parameters()) by_name[p.name] = &p;
    for (const auto& e : man.at("parameters")) {
      const std::string pname = e.at("name").get<std::string>();
      const auto it = by_name.find(pname);
      if (it == by_name.end()) continue;  // reported above
      CHECK_MATCH(compare(name + ": grad of '" + pname + "'", it->second->grad, fx.tensor(e)));
    }
    REQUIRE(model.input_grads().size() == 1);
    CHECK_MATCH(compare(name + ": grad of input '" + man.at("input_name").get<std::string>() + "'", model.input_grads()[0],
                        fx.tensor("input_grad")));

    // ---- BatchNorm running statistics after one training forward. The engine follows the ONNX
    // specification: running_var is updated with the population (biased) batch variance
    // (ReduceVar), where PyTorch uses the unbiased one; the fixture carries both, and
    // running_var is compared with the ONNX-convention update (running_mean is the same in both).
    std::map<std::string, const hpcnn::nn::Buffer*> buf_by_name;
    for (const auto& b : model.buffers()) buf_by_name[b.name] = &b;
    for (const auto& e : man.at("buffers")) {
      const std::string bname = e.at("name").get<std::string>();
      const auto it = buf_by_name.find(bname);
      if (it == buf_by_name.end()) continue;
      json expected = e;
      if (e.contains("if_biased_variance")) expected["file"] = e.at("if_biased_variance");
      Comparison c = compare(name + ": buffer '" + bname + "' after the training forward (ONNX momentum " +
                                 std::to_string(e.at("onnx_momentum").get<double>()) + ")",
                             it->second->value, fx.tensor(expected));
      if (!c.ok()) {
        const Comparison unchanged = compare("", it->second->value, initial_buffers.at(bname));
        if (unchanged.max_abs == 0.0) c.text += "; the buffer was not updated at all";
      }
      CHECK_MATCH(c);
    }

    // ---- gradients accumulate: a second identical step without zero_grad doubles them
    // (training-mode logits depend on batch statistics only, so they are unchanged).
    std::vector<Tensor> out2 = model.forward({x}, hpcnn::nn::Mode::training);
    CHECK_MATCH(compare(name + ": training-mode logits, second step", out2[0], fx.tensor("train_logits")));
    Tensor dlogits2;
    hpcnn::nn::softmax_cross_entropy(out2[0], labels, smoothing, &dlogits2);
    model.backward({dlogits2});
    for (const auto& e : man.at("parameters")) {
      const std::string pname = e.at("name").get<std::string>();
      const auto it = by_name.find(pname);
      if (it == by_name.end()) continue;
      CHECK_MATCH(
          compare(name + ": accumulated grad of '" + pname + "' after two backward()", it->second->grad, fx.tensor(e), 2.0));
    }
    // zero_grad clears them.
    model.zero_grad();
    for (const auto& p : model.parameters()) {
      INFO("grad of " << p.name << " after zero_grad");
      const Tensor g = hpcnn::to_layout(p.grad, Layout::plain);
      CHECK((!g.defined() || std::all_of(g.data(), g.data() + g.numel(), [](float v) { return v == 0.0f; })));
    }
  }
}

}  // namespace

TEST_CASE("torch fixture fmnist_cnn: Conv-BN-ReLU-MaxPool CNN", "[nn][torch_fixtures]") { run_fixture("fmnist_cnn"); }

TEST_CASE("torch fixture resnet_tiny: BasicBlocks with identity and projection shortcuts", "[nn][torch_fixtures]") {
  run_fixture("resnet_tiny");
}

TEST_CASE("torch fixture misc_ops: activations, grouped/depthwise/dilated conv, concat, pools (opset 11)",
          "[nn][torch_fixtures]") {
  run_fixture("misc_ops");
}

TEST_CASE("fixture cosmoflow_tiny: 3-D Conv, LeakyRelu, MaxPool3D, Gemm, Tanh on NCDHW volumes", "[nn][torch_fixtures]") {
  run_fixture("cosmoflow_tiny");
}
