// Every op of every registered device against the CPU twin, from one table of cases (the device
// seam of ops/kernels.h). Each case builds seeded inputs on the host, moves them to the device,
// runs forward and backward through the op contracts (which dispatch on the device) and brings
// every output back; the CPU's outputs are the reference: |got - ref| <= 1e-5 + 1e-4 |ref|.
// On a machine without a GPU the CPU runs against itself (every output must match exactly), and
// a planted faulty twin (one op's output off by 1e-3, on a stand-in device whose memory is the
// host's) must make the comparison fail, naming that op.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "ops/kernels.h"

using namespace hpcnn;
using namespace hpcnn::ops;

namespace {

Tensor host_random(const Shape& s, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  Tensor t(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = u(rng);
  return t;
}

using Outputs = std::vector<Tensor>;
struct OpCase {
  std::string name;  // names the op contract(s) the case runs
  std::function<Outputs(const Device&)> run;
};

// The inputs of a case on `d`.
Tensor on(const Device& d, const Tensor& t, Layout layout = Layout::plain) { return to_layout(t, layout).to(d); }

std::vector<OpCase> cases() {
  std::vector<OpCase> c;
  const Tensor x4 = host_random({2, 6, 7, 5}, 1), x4b = host_random({2, 6, 7, 5}, 2);
  c.push_back(
      {"conv2d (group 1, stride 2, pads, bias) forward+backward", [=](const Device& d) {
         Conv2dParams p;
         p.stride = {2, 1};
         p.pads = {1, 0, 1, 2};
         Conv2d conv(p);
         const Tensor x = on(d, x4, Layout::nhwc), w = on(d, host_random({4, 6, 3, 3}, 3)), b = on(d, host_random({4}, 4));
         Tensor y = conv.forward(x, w, b, true), gx, gw, gb;
         conv.backward(x, w, on(d, host_random(y.shape(), 5), y.layout()), &gx, &gw, &gb);
         return Outputs{y, gx, gw, gb};
       }});
  c.push_back({"conv2d (depthwise, dilation 2) forward+backward", [=](const Device& d) {
                 Conv2dParams p;
                 p.group = 6;
                 p.dilation = {2, 2};
                 p.pads = {2, 2, 2, 2};
                 Conv2d conv(p);
                 const Tensor x = on(d, x4, Layout::nhwc), w = on(d, host_random({6, 1, 3, 3}, 6));
                 Tensor y = conv.forward(x, w, Tensor(), true), gx, gw;
                 conv.backward(x, w, on(d, host_random(y.shape(), 7), y.layout()), &gx, &gw, nullptr);
                 return Outputs{y, gx, gw};
               }});
  const Tensor x5 = host_random({2, 4, 5, 6, 4}, 50);
  c.push_back({"conv3d (group 1, strides, asymmetric pads, bias) forward+backward", [=](const Device& d) {
                 Conv3dParams p;
                 p.stride = {2, 1, 2};
                 p.pads = {1, 0, 1, 0, 1, 0};
                 Conv3d conv(p);
                 const Tensor x = on(d, x5), w = on(d, host_random({3, 4, 2, 3, 2}, 51)), b = on(d, host_random({3}, 52));
                 Tensor y = conv.forward(x, w, b, true), gx, gw, gb;
                 conv.backward(x, w, on(d, host_random(y.shape(), 53)), &gx, &gw, &gb);
                 return Outputs{y, gx, gw, gb};
               }});
  c.push_back({"conv3d (group 2, dilation 2, SAME_UPPER) forward+backward", [=](const Device& d) {
                 Conv3dParams p;
                 p.group = 2;
                 p.dilation = {2, 1, 2};
                 p.auto_pad = "SAME_UPPER";
                 Conv3d conv(p);
                 const Tensor x = on(d, x5), w = on(d, host_random({4, 2, 2, 2, 2}, 54));
                 Tensor y = conv.forward(x, w, Tensor(), true), gx, gw;
                 conv.backward(x, w, on(d, host_random(y.shape(), 55)), &gx, &gw, nullptr);
                 return Outputs{y, gx, gw};
               }});
  c.push_back({"maxpool3d_forward / maxpool3d_backward (ceil_mode, pads)", [=](const Device& d) {
                 Pool3dParams p;
                 p.kernel = {2, 3, 2};
                 p.stride = {2, 2, 1};
                 p.pads = {0, 1, 0, 1, 1, 1};
                 p.ceil_mode = true;
                 MaxPoolSaved saved;
                 Tensor y = maxpool3d_forward(on(d, x5), p, &saved);
                 return Outputs{y, maxpool3d_backward(x5.shape(), saved, on(d, host_random(y.shape(), 56)))};
               }});
  c.push_back({"avgpool3d_forward / avgpool3d_backward (count_include_pad)", [=](const Device& d) {
                 Pool3dParams p;
                 p.kernel = {3, 3, 2};
                 p.pads = {1, 1, 0, 1, 1, 1};
                 p.count_include_pad = true;
                 Tensor y = avgpool3d_forward(on(d, x5), p);
                 return Outputs{y, avgpool3d_backward(x5.shape(), p, on(d, host_random(y.shape(), 57)))};
               }});
  c.push_back(
      {"sparse_fcl_forward / sparse_fcl_backward", [=](const Device& d) {
         const Tensor x = on(d, x4, Layout::nhwc), A = on(d, host_random({3, 6, 1, 1}, 40)), a = on(d, host_random({3}, 41));
         const Tensor B = on(d, host_random({4, 3 * 7 * 5}, 42)), b = on(d, host_random({4}, 43));
         SparseFclSaved saved;
         Tensor y = sparse_fcl_forward(x, A, a, B, b, &saved), gx, gA, ga, gB, gb;
         sparse_fcl_backward(x, A, B, saved, on(d, host_random({2, 4}, 44)), &gx, &gA, &ga, &gB, &gb);
         return Outputs{y, gx, gA, ga, gB, gb};
       }});
  c.push_back({"batchnorm_inference / batchnorm_training / batchnorm_backward", [=](const Device& d) {
                 const Tensor x = on(d, x4, Layout::nhwc), s = on(d, host_random({6}, 8, 0.5f, 1.5f)),
                              b = on(d, host_random({6}, 9));
                 const Tensor m = on(d, host_random({6}, 10)), v = on(d, host_random({6}, 11, 0.5f, 2.0f));
                 BatchNormStats st;
                 Tensor yi = batchnorm_inference(x, s, b, m, v, 1e-5f), yt = batchnorm_training(x, s, b, 1e-5f, st), gx, gs, gb;
                 batchnorm_backward(x, s, st, on(d, host_random(x4.shape(), 12), Layout::nhwc), &gx, &gs, &gb);
                 return Outputs{yi, yt, st.mean, st.var, gx, gs, gb};
               }});
  for (Activation a : {Activation::relu, Activation::leaky_relu, Activation::sigmoid, Activation::clip, Activation::tanh})
    c.push_back({"activation_forward / activation_backward (" + std::to_string(static_cast<int>(a)) + ")", [=](const Device& d) {
                   ActivationParams p;
                   p.kind = a;
                   p.alpha = 0.2f;
                   p.lo = -0.5f;
                   p.hi = 0.25f;
                   const Tensor x = on(d, x4, Layout::nhwc);
                   Tensor y = activation_forward(x, p);
                   Tensor g = activation_backward(activation_saves_output(a) ? y : x, on(d, x4b, Layout::nhwc), p);
                   return Outputs{y, g};
                 }});
  c.push_back({"dropout_forward / dropout_backward", [=](const Device& d) {
                 std::mt19937_64 rng(13);
                 std::vector<uint8_t> mask;
                 Tensor y = dropout_forward(on(d, x4), 0.3f, rng, mask);
                 return Outputs{y, dropout_backward(on(d, x4b), 0.3f, mask, Layout::plain)};
               }});
  c.push_back(
      {"gemm_forward / gemm_backward (transB, C broadcast)", [=](const Device& d) {
         GemmParams p;
         p.alpha = 0.5f;
         p.beta = 2.0f;
         p.trans_b = true;
         const Tensor A = on(d, host_random({5, 7}, 14)), B = on(d, host_random({3, 7}, 15)), C = on(d, host_random({3}, 16));
         Tensor y = gemm_forward(A, B, C, p), gA, gB, gC;
         gemm_backward(A, B, C, p, on(d, host_random({5, 3}, 17)), &gA, &gB, &gC);
         return Outputs{y, gA, gB, gC};
       }});
  c.push_back({"matmul_forward / matmul_backward (batch broadcast)", [=](const Device& d) {
                 const Tensor A = on(d, host_random({2, 4, 6}, 18)), B = on(d, host_random({6, 3}, 19));
                 Tensor y = matmul_forward(A, B), gA, gB;
                 matmul_backward(A, B, on(d, host_random({2, 4, 3}, 20)), &gA, &gB);
                 return Outputs{y, gA, gB};
               }});
  for (BinaryOp op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul})
    c.push_back({"binary_forward / binary_backward / reduce_to_shape (" + std::to_string(static_cast<int>(op)) + ")",
                 [=](const Device& d) {
                   const Tensor a = on(d, x4), b = on(d, host_random({1, 6, 1, 5}, 21));
                   Tensor y = binary_forward(op, a, b), ga, gb;
                   binary_backward(op, a, b, on(d, x4b), &ga, &gb);
                   Tensor r = reduce_to_shape(on(d, x4b), {6, 1, 1});
                   return Outputs{y, ga, gb, r};
                 }});
  c.push_back({"add_sub_backward", [=](const Device& d) {
                 Tensor ga, gb;
                 add_sub_backward(BinaryOp::sub, x4.shape(), Layout::plain, {6, 1, 5}, Layout::plain, on(d, x4b), &ga, &gb);
                 return Outputs{ga, gb};
               }});
  c.push_back({"maxpool_forward / maxpool_backward (ceil_mode, pads)", [=](const Device& d) {
                 Pool2dParams p;
                 p.kernel = {3, 2};
                 p.stride = {2, 2};
                 p.pads = {1, 0, 1, 1};
                 p.ceil_mode = true;
                 MaxPoolSaved saved;
                 Tensor y = maxpool_forward(on(d, x4, Layout::nhwc), p, &saved);
                 return Outputs{y, maxpool_backward(x4.shape(), saved, on(d, host_random(y.shape(), 22), Layout::nhwc))};
               }});
  c.push_back({"avgpool_forward / avgpool_backward (count_include_pad)", [=](const Device& d) {
                 Pool2dParams p;
                 p.kernel = {3, 3};
                 p.pads = {1, 1, 1, 1};
                 p.count_include_pad = true;
                 Tensor y = avgpool_forward(on(d, x4, Layout::nhwc), p);
                 return Outputs{y, avgpool_backward(x4.shape(), p, on(d, host_random(y.shape(), 23), Layout::nhwc))};
               }});
  c.push_back({"global_avgpool_forward / global_avgpool_backward", [=](const Device& d) {
                 const Tensor x = on(d, x4, Layout::nhwc);
                 Tensor y = global_avgpool_forward(x);
                 return Outputs{y, global_avgpool_backward(x, on(d, host_random(y.shape(), 24)))};
               }});
  c.push_back({"concat_forward / concat_backward", [=](const Device& d) {
                 Tensor y = concat_forward({on(d, x4, Layout::nhwc), on(d, host_random({2, 3, 7, 5}, 25), Layout::nhwc)}, 1);
                 Outputs out{y};
                 for (Tensor& g : concat_backward({x4.shape(), {2, 3, 7, 5}}, 1, on(d, host_random(y.shape(), 26), Layout::nhwc)))
                   out.push_back(g);
                 return out;
               }});
  c.push_back({"softmax_forward / softmax_backward", [=](const Device& d) {
                 Tensor y = softmax_forward(on(d, x4), -1, false);
                 return Outputs{y, softmax_backward(y, on(d, x4b), -1, false), softmax_forward(on(d, x4), 1, true)};
               }});
  c.push_back({"transpose_forward", [=](const Device& d) { return Outputs{transpose_forward(on(d, x4), {0, 2, 3, 1})}; }});
  c.push_back({"pad_forward / pad_backward", [=](const Device& d) {
                 const std::vector<int64_t> pads{0, 0, 1, 2, 0, 0, 2, 1};
                 Tensor y = pad_forward(on(d, x4), pads, 0.5f);
                 return Outputs{y, pad_backward(x4.shape(), pads, on(d, host_random(y.shape(), 27)))};
               }});
  c.push_back({"softmax_cross_entropy (label smoothing)", [=](const Device& d) {
                 const std::vector<int32_t> labels{3, 0, 9, 4, 4};
                 Tensor g;
                 const LossResult r = softmax_cross_entropy(on(d, host_random({5, 10}, 28, -3, 3)), labels, 0.1f, &g);
                 return Outputs{g, Tensor::from_values({3}, {static_cast<float>(r.loss), static_cast<float>(r.correct1),
                                                             static_cast<float>(r.correct5)})};
               }});
  c.push_back({"gather / scatter / scale", [=](const Device& d) {
                 Tensor pos_h({4}, Layout::plain, DType::i32);
                 const int32_t p[4] = {1, 5, 6, 11};
                 std::memcpy(pos_h.data_as<int32_t>(), p, sizeof p);
                 const Tensor pos = pos_h.to(d), src = on(d, host_random({12}, 29));
                 Tensor g({4}, Layout::plain, DType::f32, d), s = on(d, host_random({12}, 30));
                 gather(src, pos, g);
                 scatter(g, pos, s);
                 scale(s, -2.5f);
                 return Outputs{g, s};
               }});
  c.push_back({"sgd_update / lars_update", [=](const Device& d) {
                 Tensor w1 = on(d, host_random({40}, 31)), v1 = on(d, host_random({40}, 32));
                 Tensor w2 = on(d, host_random({40}, 31)), v2 = on(d, host_random({40}, 32));
                 const Tensor g = on(d, host_random({40}, 33));
                 sgd_update(w1, g, v1, SgdParams{0.1f, 0.9f, 0.01f, true});
                 lars_update(w2, g, v2, SgdParams{0.5f, 0.9f, 0.01f, false}, 0.02f);
                 return Outputs{w1, v1, w2, v2};
               }});
  return c;
}

// Runs every case on `device` and on the CPU; returns one line per mismatching case.
std::vector<std::string> compare_with_cpu(const Device& device) {
  std::vector<std::string> failures;
  for (const auto& c : cases()) {
    const Outputs ref = c.run(Device::cpu());
    const Outputs got = c.run(device);
    std::ostringstream why;
    if (got.size() != ref.size()) why << got.size() << " outputs, the CPU " << ref.size();
    for (size_t i = 0; i < ref.size() && i < got.size() && why.str().empty(); ++i) {
      const Tensor r = to_layout(ref[i], Layout::plain), g = to_layout(got[i].to(Device::cpu()), Layout::plain);
      if (r.shape() != g.shape()) {
        why << "output " << i << " has shape " << shape_to_string(g.shape()) << ", the CPU's " << shape_to_string(r.shape());
        break;
      }
      for (int64_t j = 0; j < r.numel(); ++j) {
        const double e = r.data()[j], a = g.data()[j];
        if (!(std::abs(a - e) <= 1e-5 + 1e-4 * std::abs(e)) || (device.is_cpu() && a != e)) {
          why << "output " << i << " element " << j << ": " << a << ", the CPU " << e;
          break;
        }
      }
    }
    if (!why.str().empty()) failures.push_back(c.name + ": " + why.str());
  }
  return failures;
}

// A stand-in device whose memory is the host's, for the planted twin.
void* host_allocate(size_t bytes, int) { return std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64)); }
void host_release(void* p, int) noexcept { std::free(p); }
void host_copy(void* dst, Device, const void* src, Device, size_t bytes) { std::memcpy(dst, src, bytes); }
const DeviceMemory kStandInMemory{host_allocate, host_release, host_copy};

Tensor faulty_activation(ExecutionContext& ctx, const Tensor& x, const ActivationParams& p) {
  Tensor y = cpu_kernels().activation_forward(ctx, x, p);
  y.data()[0] += 1e-3f;  // the planted fault
  return y;
}

}  // namespace

TEST_CASE("every op of every registered device matches the CPU twin", "[ops][device]") {
  const auto kinds = registered_device_kinds();
  REQUIRE(kinds.front() == Device::Kind::cpu);
  for (Device::Kind kind : kinds) {
    INFO("device " << (Device{kind, 0}).str());
    const auto failures = compare_with_cpu(Device{kind, 0});
    for (const auto& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
  CHECK(cases().size() >= 20);
}

TEST_CASE("a planted faulty twin (one op off by 1e-3) fails the comparison", "[ops][device]") {
  // Stand in for a second device kind (restoring a real one if this build registered it).
  const bool had_cuda = has_device_memory(Device::Kind::cuda);
  const DeviceMemory* saved_memory = had_cuda ? &device_memory(Device::Kind::cuda) : nullptr;
  const Kernels* saved_kernels = had_cuda ? &kernels(Device::cuda()) : nullptr;
  Kernels faulty = cpu_kernels();
  faulty.name = "faulty twin";
  faulty.activation_forward = faulty_activation;
  register_device_memory(Device::Kind::cuda, &kStandInMemory);
  register_kernels(Device::Kind::cuda, &faulty);
  const auto failures = compare_with_cpu(Device::cuda());
  register_kernels(Device::Kind::cuda, saved_kernels);
  register_device_memory(Device::Kind::cuda, saved_memory);
  REQUIRE(failures.size() == 5);  // the five activation cases, and nothing else
  for (const auto& f : failures) CHECK_THAT(f, Catch::StartsWith("activation_forward"));

  // Without the fault the stand-in device passes: the comparison is not failing by itself.
  Kernels twin = cpu_kernels();
  register_device_memory(Device::Kind::cuda, &kStandInMemory);
  register_kernels(Device::Kind::cuda, &twin);
  const auto clean = compare_with_cpu(Device::cuda());
  register_kernels(Device::Kind::cuda, saved_kernels);
  register_device_memory(Device::Kind::cuda, saved_memory);
  CHECK(clean.empty());
}
