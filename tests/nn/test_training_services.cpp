// The training services of nn::Model: BatchNormalization statistics (Chan merge, the three
// treatments of nn/batchnorm_statistics.h) and the gradient-ready hook of backward().
#include <onnx/onnx_pb.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <random>

#include "data/npy.h"
#include "error_check.h"
#include "nn/batchnorm_statistics.h"
#include "nn/loss.h"
#include "nn/model.h"
#include "nn/proto_tensor.h"

using namespace hpcnn;

namespace {

// Per-channel mean and population variance of x [N, C, H, W] in long double, two passes.
void reference_moments(const std::vector<Tensor>& xs, std::vector<long double>& mean, std::vector<long double>& var) {
  const int64_t C = xs.at(0).dim(1);
  mean.assign(C, 0);
  long double n = 0;
  for (const Tensor& x : xs) n += static_cast<long double>(x.dim(0) * x.dim(2) * x.dim(3));
  for (const Tensor& x : xs) {
    const int64_t N = x.dim(0), HW = x.dim(2) * x.dim(3);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p) mean[c] += x.data()[(i * C + c) * HW + p];
  }
  for (auto& m : mean) m /= n;
  var.assign(C, 0);
  for (const Tensor& x : xs) {
    const int64_t N = x.dim(0), HW = x.dim(2) * x.dim(3);
    for (int64_t i = 0; i < N; ++i)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t p = 0; p < HW; ++p) {
          const long double d = x.data()[(i * C + c) * HW + p] - mean[c];
          var[c] += d * d;
        }
  }
  for (auto& v : var) v /= n;
}

// x [N, C, 4, 4] -> BatchNormalization (momentum 0.8) -> y.
onnx::ModelProto bn_proto(int64_t C) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("bn");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  g->add_output()->set_name("y");
  g->mutable_output(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  auto* node = g->add_node();
  node->set_op_type("BatchNormalization");
  node->set_name("bn");
  for (const char* s : {"x", "scale", "bias", "mean", "var"}) node->add_input(s);
  node->add_output("y");
  auto* a = node->add_attribute();
  a->set_name("momentum");
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(0.8f);
  for (auto [name, value] : {std::pair{"scale", 1.0f}, {"bias", 0.0f}, {"mean", 0.5f}, {"var", 2.0f}}) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_dims(C);
    for (int64_t c = 0; c < C; ++c) t->add_float_data(value);
  }
  return m;
}

nn::Model bn_model(int64_t C) { return nn::Model(bn_proto(C), "bn test model"); }

std::vector<Tensor> random_batches(int64_t C, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Tensor> xs;
  for (int64_t n : {3, 5, 1, 8}) {
    Tensor x({n, C, 4, 4});
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < x.numel(); ++i) x.data()[i] = 100.0f + 3.0f * normal(rng) + static_cast<float>(i % C);
    xs.push_back(x);
  }
  return xs;
}

}  // namespace

TEST_CASE("Chan's merge of moments equals the moments of all the values", "[nn][batchnorm]") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(1e3, 0.01);  // a large mean: one-pass sums would lose digits
  std::vector<double> all;
  nn::ChannelMoments merged;
  for (int part = 0; part < 7; ++part) {
    std::vector<double> v(static_cast<size_t>(10 + 37 * part));
    for (double& x : v) x = normal(rng);
    all.insert(all.end(), v.begin(), v.end());
    nn::ChannelMoments m;
    m.count = static_cast<double>(v.size());
    double mean = 0;
    for (double x : v) mean += x;
    mean /= m.count;
    double m2 = 0;
    for (double x : v) m2 += (x - mean) * (x - mean);
    m.mean = {mean};
    m.m2 = {m2};
    merged.merge(m);
  }
  long double mean = 0, var = 0;
  for (double x : all) mean += x;
  mean /= all.size();
  for (double x : all) var += (x - mean) * (x - mean);
  var /= all.size();
  CHECK(merged.count == all.size());
  CHECK(merged.mean[0] == Approx(static_cast<double>(mean)).epsilon(1e-14));
  CHECK(merged.variance()[0] == Approx(static_cast<double>(var)).epsilon(1e-9));
  nn::ChannelMoments other;
  other.count = 1;
  other.mean = {0, 0};
  other.m2 = {0, 0};
  testing::check_error([&] { merged.merge(other); }, ErrorKind::bad_input, "cannot be merged");
}

TEST_CASE("BatchNormalization statistics: collect, deferred and running updates", "[nn][batchnorm]") {
  const int64_t C = 3;
  const auto xs = random_batches(C, 7);
  // collect: the merged moments are those of all the batches' values; running stats untouched.
  nn::Model m = bn_model(C);
  REQUIRE(m.batchnorm_layers().size() == 1);
  CHECK(m.batchnorm_layers()[0].momentum == Approx(0.8f));
  m.set_batchnorm_statistics(nn::BatchNormStatistics::collect);
  for (const Tensor& x : xs) m.forward({x}, nn::Mode::training);
  const auto collected = m.take_collected_moments();
  REQUIRE(collected.size() == 1);
  std::vector<long double> mean, var;
  reference_moments(xs, mean, var);
  for (int64_t c = 0; c < C; ++c) {
    CHECK(collected[0].mean[c] == Approx(static_cast<double>(mean[c])).epsilon(1e-12));
    CHECK(collected[0].variance()[c] == Approx(static_cast<double>(var[c])).epsilon(1e-6));
  }
  CHECK(m.buffers()[m.batchnorm_layers()[0].mean_buffer].value.data()[0] == 0.5f);
  m.set_running_statistics(0, collected[0]);
  CHECK(m.buffers()[m.batchnorm_layers()[0].mean_buffer].value.data()[1] == Approx(static_cast<double>(mean[1])));
  CHECK(m.buffers()[m.batchnorm_layers()[0].var_buffer].value.data()[2] == Approx(static_cast<double>(var[2])));

  // running_update (the default) and deferred + update_running_statistics give the same buffers,
  // and both are the momentum formula applied batch after batch.
  nn::Model a = bn_model(C), b = bn_model(C);
  b.set_batchnorm_statistics(nn::BatchNormStatistics::deferred);
  std::vector<double> rm(C, 0.5), rv(C, 2.0);
  for (const Tensor& x : xs) {
    a.forward({x}, nn::Mode::training);
    b.forward({x}, nn::Mode::training);
    std::vector<long double> bm, bv;
    reference_moments({x}, bm, bv);
    for (int64_t c = 0; c < C; ++c) {
      rm[c] = 0.8 * rm[c] + 0.2 * static_cast<double>(bm[c]);
      rv[c] = 0.8 * rv[c] + 0.2 * static_cast<double>(bv[c]);
    }
  }
  CHECK(b.buffers()[0].value.data()[0] == 0.5f);  // deferred: nothing changed yet
  const auto pending = b.take_batch_moments();
  REQUIRE(pending.size() == xs.size());
  for (const auto& forward : pending) b.update_running_statistics(0, forward.at(0));
  CHECK(b.take_batch_moments().empty());
  for (int64_t c = 0; c < C; ++c)
    for (nn::Model* model : {&a, &b}) {
      const auto& L = model->batchnorm_layers()[0];
      CHECK(model->buffers()[L.mean_buffer].value.data()[c] == Approx(rm[c]).epsilon(1e-5));
      CHECK(model->buffers()[L.var_buffer].value.data()[c] == Approx(rv[c]).epsilon(1e-5));
    }
  // Inference forwards record nothing.
  b.forward({xs[0]}, nn::Mode::inference);
  CHECK(b.take_batch_moments().empty());
}

TEST_CASE("backward announces each parameter once, when its gradient is final", "[nn]") {
  const std::filesystem::path dir = std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / "resnet_tiny";
  nn::Model model = nn::Model::load((dir / "model.onnx").string());
  const Tensor images = data::npy_to_tensor(data::read_npy((dir / "input.npy").string()));
  const std::vector<int32_t> labels = data::npy_to_labels(data::read_npy((dir / "labels.npy").string()));
  auto& params = model.parameters();
  std::vector<int> calls(params.size(), 0);
  std::vector<Tensor> at_hook(params.size());
  std::vector<size_t> order;
  model.set_gradient_ready_hook([&](size_t k) {
    ++calls.at(k);
    at_hook[k] = params[k].grad.clone();
    order.push_back(k);
  });
  model.zero_grad();
  auto out = model.forward({images}, nn::Mode::training);
  Tensor grad;
  nn::softmax_cross_entropy(out.at(0), labels, 0.0f, &grad);
  std::vector<Tensor> grads(out.size());
  grads[0] = grad;
  model.backward(grads);
  for (size_t k = 0; k < params.size(); ++k) {
    INFO(params[k].name);
    CHECK(calls[k] == 1);
    REQUIRE(at_hook[k].defined());
    for (int64_t i = 0; i < params[k].grad.numel(); ++i) REQUIRE(at_hook[k].data()[i] == params[k].grad.data()[i]);
  }
  // The last layer's parameters are final first (backward runs from the output).
  REQUIRE(!order.empty());
  CHECK(params[order.front()].name.rfind("fc", 0) == 0);
}

TEST_CASE("release_exported_weights frees the proto's weights and export_weights fills them again", "[nn]") {
  onnx::ModelProto proto = bn_proto(8);
  for (auto& t : *proto.mutable_graph()->mutable_initializer()) {  // as raw data, as exporters write it
    std::string raw(reinterpret_cast<const char*>(t.float_data().data()), sizeof(float) * 8);
    t.clear_float_data();
    t.set_raw_data(raw);
  }
  auto* extra = proto.mutable_graph()->add_initializer();  // read by no node: not the model's, kept
  extra->set_name("extra");
  extra->set_data_type(onnx::TensorProto::FLOAT);
  extra->add_dims(2);
  extra->add_float_data(7.0f);
  extra->add_float_data(8.0f);
  nn::Model model(proto, "bn test model");
  const size_t before = proto.ByteSizeLong();
  model.release_exported_weights(proto);
  CHECK(proto.ByteSizeLong() + 4 * 8 * sizeof(float) <= before);  // the 4 tensors' data are gone
  for (const auto& t : proto.graph().initializer()) {
    INFO(t.name());
    if (t.name() == "extra") {
      CHECK(t.float_data_size() == 2);
      continue;
    }
    CHECK(t.raw_data().empty());
    CHECK(t.raw_data().capacity() < 16);  // freed, not only cleared (small-string buffer at most)
    CHECK(t.float_data_size() == 0);
    CHECK(t.dims_size() == 1);
    CHECK(t.dims(0) == 8);
  }
  model.export_weights(proto);
  for (const auto& t : proto.graph().initializer()) {
    if (t.name() == "extra") continue;
    const Tensor v = nn::tensor_from_proto(t);
    const float want = t.name() == "scale" ? 1.0f : t.name() == "bias" ? 0.0f : t.name() == "mean" ? 0.5f : 2.0f;
    INFO(t.name());
    REQUIRE(v.numel() == 8);
    for (int64_t c = 0; c < 8; ++c) CHECK(v.data()[c] == want);
  }
}
