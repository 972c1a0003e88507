// nn/spatial.h: a depth-split model run by S "ranks" (threads of this process, exchanging through
// shared memory) equals the whole model: the outputs, and the mean over the slabs of each
// parameter's gradient (the data-parallel average: SlabGather scales the slab gradients by S).
// Also the split's refusals and its halo plan on the CosmoFlow-like fixture.
#include <barrier>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <stdexcept>
#include <thread>

#include "core/error.h"
#include "data/npy.h"
#include "nn/model.h"
#include "nn/spatial.h"
#include "nn/threads.h"
#include "onnx/model.h"

using namespace hpcnn;

namespace {

// S slabs in one process: each exchange() and allgather() is two barriers around copies between
// the slabs' posted buffers.
class Bus {
 public:
  explicit Bus(int slabs) : S(slabs), sync(slabs), posts(static_cast<size_t>(slabs)) {}
  struct Post {
    const float* to_prev = nullptr;
    const float* to_next = nullptr;
    const float* mine = nullptr;
    size_t n_to_prev = 0, n_to_next = 0, count = 0;
  };
  const int S;
  std::barrier<> sync;
  std::vector<Post> posts;
};

class ThreadSlab final : public nn::SlabExchange {
 public:
  ThreadSlab(Bus& bus, int slab) : bus_(bus), slab_(slab) {}
  int slab() const override { return slab_; }
  int slabs() const override { return bus_.S; }
  void exchange(const float* to_prev, size_t n_to_prev, const float* to_next, size_t n_to_next, float* from_prev,
                size_t n_from_prev, float* from_next, size_t n_from_next) override {
    auto& me = bus_.posts[static_cast<size_t>(slab_)];
    me.to_prev = to_prev, me.n_to_prev = n_to_prev, me.to_next = to_next, me.n_to_next = n_to_next;
    bus_.sync.arrive_and_wait();
    if (slab_ > 0) {
      const auto& p = bus_.posts[static_cast<size_t>(slab_ - 1)];
      if (p.n_to_next != n_from_prev) throw std::runtime_error("halo sizes differ (prev)");  // no Catch macros off the main thread
      std::memcpy(from_prev, p.to_next, n_from_prev * sizeof(float));
      sent_ += n_to_prev * sizeof(float);
    }
    if (slab_ + 1 < bus_.S) {
      const auto& p = bus_.posts[static_cast<size_t>(slab_ + 1)];
      if (p.n_to_prev != n_from_next) throw std::runtime_error("halo sizes differ (next)");
      std::memcpy(from_next, p.to_prev, n_from_next * sizeof(float));
      sent_ += n_to_next * sizeof(float);
    }
    bus_.sync.arrive_and_wait();
  }
  void allgather(const float* mine, size_t count, float* all) override {
    bus_.posts[static_cast<size_t>(slab_)].mine = mine;
    bus_.posts[static_cast<size_t>(slab_)].count = count;
    bus_.sync.arrive_and_wait();
    for (int s = 0; s < bus_.S; ++s) std::memcpy(all + s * count, bus_.posts[static_cast<size_t>(s)].mine, count * sizeof(float));
    bus_.sync.arrive_and_wait();
  }
  uint64_t halo_bytes_sent() const override { return sent_; }
  double halo_seconds() const override { return 0.0; }

 private:
  Bus& bus_;
  int slab_;
  uint64_t sent_ = 0;
};

onnx::ModelProto fixture() {
  const auto dir = std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / "cosmoflow_tiny";
  return onnxu::load_model((dir / "model.onnx").string()).proto;
}

Tensor fixture_input() {
  const auto dir = std::filesystem::path(HPCNN_TEST_DATA_DIR) / "nn" / "cosmoflow_tiny";
  return data::npy_to_tensor(data::read_npy((dir / "input.npy").string()));
}

double max_abs(const Tensor& a) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(static_cast<double>(a.data()[i])));
  return m;
}

double max_rel(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double scale = 0, diff = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    scale = std::max(scale, std::abs(static_cast<double>(b.data()[i])));
    diff = std::max(diff, std::abs(static_cast<double>(a.data()[i]) - b.data()[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// Runs `proto` whole and split into S slabs (threads), training mode, with one fixed output
// gradient; checks outputs, the mean over slabs of each parameter gradient, which gradients are the
// same on every slab, and (with BatchNorm) the batch moments; returns the halo bytes each slab sent.
std::vector<uint64_t> check_split_equals_whole(const onnx::ModelProto& proto, const Tensor& x, int S) {
  nn::set_num_threads(1);
  nn::Model whole(proto, "whole");
  whole.set_batchnorm_statistics(nn::BatchNormStatistics::deferred);
  const std::vector<Tensor> y = whole.forward({x}, nn::Mode::training);
  const auto whole_moments = whole.take_batch_moments();
  Tensor gy(y[0].shape());
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < gy.numel(); ++i) gy.data()[i] = normal(rng);
  whole.zero_grad();
  whole.backward({gy});

  const nn::SpatialSplit split = nn::split_depth(proto, "whole", S);
  Bus bus(S);
  std::vector<std::vector<Tensor>> outs(S);
  std::vector<std::vector<Tensor>> grads(S);
  std::vector<std::vector<std::vector<nn::ChannelMoments>>> moments(S);
  std::vector<uint64_t> sent(S);
  std::vector<std::string> errors(S);
  std::vector<std::thread> ranks;
  for (int s = 0; s < S; ++s)
    ranks.emplace_back([&, s] {
      try {
        ThreadSlab slab(bus, s);
        nn::ModelOptions o;
        o.slabs = &slab;
        nn::Model m(split.model, "slab", o);
        m.set_batchnorm_statistics(nn::BatchNormStatistics::deferred);
        outs[s] = m.forward({nn::depth_slab(x, s, S)}, nn::Mode::training);
        moments[s] = m.take_batch_moments();
        m.zero_grad();
        m.backward({gy});
        for (auto& p : m.parameters()) grads[s].push_back(p.grad.to(Device::cpu()));
        sent[s] = slab.halo_bytes_sent();
      } catch (const std::exception& e) {
        errors[s] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int s = 0; s < S; ++s) REQUIRE(errors[s].empty());
  for (int s = 0; s < S; ++s) CHECK(max_rel(outs[s][0], y[0]) < 1e-5);
  const auto& params = whole.parameters();
  // Relative to the largest gradient entry of the model: a conv bias before a BatchNormalization
  // has a gradient of zero up to rounding, which has no scale of its own.
  double largest = 0;
  for (const auto& p : params) largest = std::max(largest, max_abs(p.grad));
  for (size_t p = 0; p < params.size(); ++p) {
    Tensor mean = Tensor::zeros(params[p].grad.shape());
    for (int s = 0; s < S; ++s)
      for (int64_t i = 0; i < mean.numel(); ++i) mean.data()[i] += grads[s][p].data()[i] / S;
    INFO(params[p].name);
    double diff = 0;
    for (int64_t i = 0; i < mean.numel(); ++i)
      diff = std::max(diff, std::abs(static_cast<double>(mean.data()[i]) - params[p].grad.data()[i]));
    CHECK(diff / largest < 1e-5);
    if (max_abs(params[p].grad) > 1e-3 * largest) CHECK(max_rel(mean, params[p].grad) < 1e-4);
  }
  // The parameters that split_depth() says only the layers after a gather read have the same
  // gradient on every slab (train/ sums them over the replicas only); the slab layers' differ.
  int replicated = 0, partial = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    INFO(params[p].name);
    bool same = true;
    for (int s = 1; s < S; ++s)
      for (int64_t i = 0; i < grads[0][p].numel(); ++i) same &= grads[s][p].data()[i] == grads[0][p].data()[i];
    if (!split.slab_initializers.count(params[p].name)) {
      CHECK(same);
      ++replicated;
    } else {
      ++partial;
      if (max_abs(params[p].grad) > 1e-3 * largest) CHECK_FALSE(same);
    }
  }
  CHECK(replicated > 0);
  CHECK(partial > 0);
  // Every slab reports the whole batch's moments (the group's).
  REQUIRE(whole_moments.size() == 1);
  for (int s = 0; s < S; ++s) {
    REQUIRE(moments[s].size() == 1);
    REQUIRE(moments[s][0].size() == whole_moments[0].size());
    for (size_t l = 0; l < whole_moments[0].size(); ++l) {
      const nn::ChannelMoments &a = moments[s][0][l], &b = whole_moments[0][l];
      CHECK(a.count == b.count);
      for (size_t c = 0; c < b.channels(); ++c) {
        CHECK(a.mean[c] == Approx(b.mean[c]).epsilon(1e-9).margin(1e-12));
        CHECK(a.m2[c] == Approx(b.m2[c]).epsilon(1e-9));
      }
    }
  }
  return sent;
}

// The fixture with a BatchNormalization (and a LeakyRelu) after each Conv of the slab part:
// Conv -> BN -> ..., the BN's statistics random enough to matter.
onnx::ModelProto with_batchnorm(const onnx::ModelProto& proto) {
  onnx::ModelProto m = proto;
  onnx::GraphProto& g = *m.mutable_graph();
  std::map<std::string, int64_t> channels;
  for (const auto& t : g.initializer()) channels[t.name()] = t.dims_size() > 0 ? t.dims(0) : 0;
  onnx::GraphProto out = g;
  out.clear_node();
  int k = 0;
  for (const auto& n : g.node()) {
    if (n.op_type() != "Conv") {
      *out.add_node() = n;
      continue;
    }
    const std::string tag = "bn" + std::to_string(k++), y = n.output(0), pre = y + "_pre";
    onnx::NodeProto conv = n;
    conv.set_output(0, pre);
    *out.add_node() = conv;
    const int64_t C = channels.at(n.input(1));
    std::mt19937 rng(static_cast<unsigned>(k));
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (const char* part : {"scale", "bias", "mean", "var"}) {
      onnx::TensorProto* t = out.add_initializer();
      t->set_name(tag + "_" + part);
      t->set_data_type(onnx::TensorProto::FLOAT);
      t->add_dims(C);
      for (int64_t c = 0; c < C; ++c) t->add_float_data(std::string(part) == "bias" || std::string(part) == "mean" ? u(rng) - 1.0f : u(rng));
    }
    onnx::NodeProto* bn = out.add_node();
    bn->set_op_type("BatchNormalization");
    bn->set_name(tag);
    bn->add_input(pre);
    for (const char* part : {"scale", "bias", "mean", "var"}) bn->add_input(tag + "_" + part);
    bn->add_output(y);
  }
  g = out;
  return m;
}

}  // namespace

TEST_CASE("spatial split: S slabs in threads equal the whole model, forward and backward", "[nn][spatial]") {
  const onnx::ModelProto proto = fixture();
  const Tensor x = fixture_input();
  const int S = 2;
  const nn::SpatialSplit split = nn::split_depth(proto, "cosmoflow_tiny", S);
  REQUIRE(split.halos.size() == 2);
  CHECK(split.halos[0].lo == 1);  // k 3, SAME_UPPER: one plane from each neighbour
  CHECK(split.halos[0].hi == 1);
  CHECK(split.halo_bytes_per_sample() == (2 * 4 * 8 * 8 + 2 * split.halos[1].channels * 4 * 4) * sizeof(float));
  const std::vector<uint64_t> sent = check_split_equals_whole(proto, x, S);
  // Halo bytes: with 2 slabs each sends its one boundary plane (lo = hi = 1) per conv forward,
  // and per conv backward except the first's (the images need no gradient):
  // n * C * H * W * 4 bytes per conv and direction.
  auto plane_bytes = [&](const nn::HaloPlan& h) { return static_cast<uint64_t>(x.dim(0) * h.channels * h.height * h.width) * 4; };
  const uint64_t want = 2 * plane_bytes(split.halos[1]) + plane_bytes(split.halos[0]);
  CHECK(sent[0] == want);
  CHECK(sent[1] == want);
}

TEST_CASE("spatial split: BatchNormalization on slabs uses the group's batch statistics", "[nn][spatial]") {
  const onnx::ModelProto proto = with_batchnorm(fixture());
  const Tensor x = fixture_input();
  const nn::SpatialSplit split = nn::split_depth(proto, "bn", 2);
  int slab_bns = 0;
  for (const auto& n : split.model.graph().node()) slab_bns += n.op_type() == "BatchNormalization" && n.domain() == nn::kSpatialDomain;
  CHECK(slab_bns == 2);
  check_split_equals_whole(proto, x, 2);
  // A BatchNormalization with running-statistics outputs on a slab is refused, naming the node.
  onnx::ModelProto extra = proto;
  for (auto& n : *extra.mutable_graph()->mutable_node())
    if (n.op_type() == "BatchNormalization") {
      n.add_output("rm");
      n.add_output("rv");
      auto* a = n.add_attribute();
      a->set_name("training_mode");
      a->set_type(onnx::AttributeProto::INT);
      a->set_i(1);
      break;
    }
  CHECK_THROWS_WITH(nn::split_depth(extra, "bn.onnx", 2), Catch::Contains("bn0") && Catch::Contains("running-statistics outputs"));
}

TEST_CASE("spatial split: refusals name the node and the sizes", "[nn][spatial]") {
  const onnx::ModelProto proto = fixture();
  // 8 planes in 3 slabs.
  CHECK_THROWS_WITH(nn::split_depth(proto, "m.onnx", 3), Catch::Contains("m.onnx: spatial split 3") &&
                                                            Catch::Contains("depth 8, which 3 slabs do not divide"));
  // 4 slabs of 2 planes: after the first pooling a slab is 1 plane, and the second pooling (stride 2) would cut its window.
  CHECK_THROWS_WITH(nn::split_depth(proto, "m.onnx", 4), Catch::Contains("(MaxPool) would cut a pooling window"));
  // 8 slabs of 1 plane: the first conv's halo fits (1 plane); the first pooling cuts.
  CHECK_THROWS_AS(nn::split_depth(proto, "m.onnx", 8), Error);
  // A 5x5x5 first conv (SAME: 2 planes each side) in slabs of 1 plane: the halo is thicker than the slab.
  onnx::ModelProto wide = proto;
  const std::string w1 = wide.graph().node(0).input(1);
  for (auto& t : *wide.mutable_graph()->mutable_initializer())
    if (t.name() == w1) {
      const int64_t m = t.dims(0), c = t.dims(1);
      t.clear_dims();
      for (int64_t d : {m, c, int64_t{5}, int64_t{5}, int64_t{5}}) t.add_dims(d);
      t.clear_raw_data();
      t.clear_float_data();
      t.set_raw_data(std::string(static_cast<size_t>(m * c * 125) * sizeof(float), '\0'));
    }
  for (auto& at : *wide.mutable_graph()->mutable_node(0)->mutable_attribute())
    if (at.name() == "kernel_shape")
      for (int i = 0; i < 3; ++i) at.set_ints(i, 5);
  CHECK_THROWS_WITH(nn::split_depth(wide, "wide.onnx", 8),
                    Catch::Contains("needs a halo of 2 planes, thicker than the slab of 1 planes (input depth 8 / 8)"));
  CHECK(nn::split_depth(wide, "wide.onnx", 2).halos[0].lo == 2);
  // A model without a split runs the hpcnn nodes nowhere else: building one without a SlabExchange is refused.
  const nn::SpatialSplit split = nn::split_depth(proto, "m.onnx", 2);
  CHECK_THROWS_WITH(nn::Model(split.model, "m.onnx"), Catch::Contains("runs only in a model built for a spatial split"));
  // S = 1 gathers nothing but the output, and halos are the conv's own pads.
  const nn::SpatialSplit one = nn::split_depth(proto, "m.onnx", 1);
  CHECK(one.halos.size() == 2);
}
