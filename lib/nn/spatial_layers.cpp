// The two nodes of a depth-split model (nn/spatial.h): HaloExchange and SlabGather, on slabs
// [N, C, Ds, H, W] fp32 in host memory (the CPU path; a device tensor is copied to the host and
// back).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/batchnorm_statistics.h"
#include "nn/layer.h"
#include "ops/batchnorm.h"
#include "nn/spatial.h"
#include "onnx/graph.h"

namespace hpcnn::nn::detail {

// Copies planes [from, from + count) of every (n, c) of `src` (depth src_d) to planes [to, to + count)
// of `dst` (depth dst_d), `plane` floats each; with `add`, adds instead.
static void copy_planes(const float* src, int64_t src_d, int64_t from, float* dst, int64_t dst_d, int64_t to, int64_t count,
                 int64_t nc, int64_t plane, bool add = false) {
  if (count <= 0) return;
  const int64_t n = count * plane;
  for (int64_t i = 0; i < nc; ++i) {
    const float* s = src + (i * src_d + from) * plane;
    float* d = dst + (i * dst_d + to) * plane;
    if (add)
      for (int64_t k = 0; k < n; ++k) d[k] += s[k];
    else
      std::memcpy(d, s, static_cast<size_t>(n) * sizeof(float));
  }
}

namespace {

const Tensor& slab_input(const std::vector<const Value*>& in, const char* op) {
  if (in.empty() || !in[0] || !in[0]->defined() || in[0]->is_int)
    throw_error(ErrorKind::bad_input, std::string(op) + ": its input is missing or not fp32");
  if (in[0]->t.rank() != 5)
    throw_error(ErrorKind::bad_input, std::string(op) + ": a slab is 5-D [N, C, D, H, W], got " + shape_to_string(in[0]->t.shape()));
  return in[0]->t;
}

class HaloExchangeLayer final : public Layer {
 public:
  HaloExchangeLayer(const onnx::NodeProto& node, SlabExchange* slabs)
      : slabs_(slabs), lo_(onnxu::attr_int(node, "lo", 0)), hi_(onnxu::attr_int(node, "hi", 0)) {
    if (lo_ < 0 || hi_ < 0) throw_error(ErrorKind::bad_input, "HaloExchange: lo and hi must be >= 0");
  }
  bool differentiable_input(int i) const override { return i == 0; }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    const Tensor x = slab_input(in, "HaloExchange").to(Device::cpu());
    shape_ = x.shape();
    const int64_t nc = shape_[0] * shape_[1], D = shape_[2], P = shape_[3] * shape_[4];
    if (lo_ > D || hi_ > D)
      throw_error(ErrorKind::bad_input, "HaloExchange: a halo of " + std::to_string(std::max(lo_, hi_)) +
                                            " planes from a slab of " + std::to_string(D));
    // Every plane of y is written below: the slab, then the halos (zeros where no neighbour sends).
    Tensor y({shape_[0], shape_[1], lo_ + D + hi_, shape_[3], shape_[4]});
    copy_planes(x.data(), D, 0, y.data(), lo_ + D + hi_, lo_, D, nc, P);
    std::vector<float> to_prev(static_cast<size_t>(nc * hi_ * P)), to_next(static_cast<size_t>(nc * lo_ * P));
    std::vector<float> from_prev(static_cast<size_t>(nc * lo_ * P), 0.0f), from_next(static_cast<size_t>(nc * hi_ * P), 0.0f);
    copy_planes(x.data(), D, 0, to_prev.data(), hi_, 0, hi_, nc, P);         // my first hi planes: the previous slab's upper halo
    copy_planes(x.data(), D, D - lo_, to_next.data(), lo_, 0, lo_, nc, P);  // my last lo planes: the next slab's lower halo
    slabs_->exchange(to_prev.data(), to_prev.size(), to_next.data(), to_next.size(), from_prev.data(), from_prev.size(),
                     from_next.data(), from_next.size());
    copy_planes(from_prev.data(), lo_, 0, y.data(), lo_ + D + hi_, 0, lo_, nc, P);
    copy_planes(from_next.data(), hi_, 0, y.data(), lo_ + D + hi_, lo_ + D, hi_, nc, P);
    out[0] = Value::of(y.to(in[0]->t.device()));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy_in,
                std::vector<Tensor>& gin, const std::vector<bool>& need) override {
    const Tensor gy = to_layout(gy_in.to(Device::cpu()), Layout::plain);
    const int64_t nc = shape_[0] * shape_[1], D = shape_[2], P = shape_[3] * shape_[4], Dy = lo_ + D + hi_;
    Tensor gx(shape_);
    copy_planes(gy.data(), Dy, lo_, gx.data(), D, 0, D, nc, P);
    // The halo planes' gradients belong to the neighbours' boundary planes.
    std::vector<float> to_prev(static_cast<size_t>(nc * lo_ * P)), to_next(static_cast<size_t>(nc * hi_ * P));
    std::vector<float> from_prev(static_cast<size_t>(nc * hi_ * P), 0.0f), from_next(static_cast<size_t>(nc * lo_ * P), 0.0f);
    copy_planes(gy.data(), Dy, 0, to_prev.data(), lo_, 0, lo_, nc, P);
    copy_planes(gy.data(), Dy, lo_ + D, to_next.data(), hi_, 0, hi_, nc, P);
    slabs_->exchange(to_prev.data(), to_prev.size(), to_next.data(), to_next.size(), from_prev.data(), from_prev.size(),
                     from_next.data(), from_next.size());
    copy_planes(from_prev.data(), hi_, 0, gx.data(), D, 0, hi_, nc, P, true);         // my first hi planes
    copy_planes(from_next.data(), lo_, 0, gx.data(), D, D - lo_, lo_, nc, P, true);  // my last lo planes
    if (need.at(0)) gin[0] = gx.to(gy_in.device());
  }

 private:
  SlabExchange* slabs_;
  int64_t lo_, hi_;
  Shape shape_;
};

class SlabGatherLayer final : public Layer {
 public:
  SlabGatherLayer(const onnx::NodeProto& node, SlabExchange* slabs)
      : slabs_(slabs), scale_(static_cast<float>(onnxu::attr_int(node, "backward_scale", 1))) {
    const int64_t S = onnxu::attr_int(node, "slabs", slabs->slabs());
    if (S != slabs->slabs())
      throw_error(ErrorKind::usage, "SlabGather: the model was split for " + std::to_string(S) + " slabs, the group has " +
                                        std::to_string(slabs->slabs()));
  }
  bool differentiable_input(int i) const override { return i == 0; }
  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext&) override {
    const Tensor x = slab_input(in, "SlabGather").to(Device::cpu());
    shape_ = x.shape();
    const int64_t S = slabs_->slabs(), nc = shape_[0] * shape_[1], D = shape_[2], P = shape_[3] * shape_[4];
    std::vector<float> all(static_cast<size_t>(S * x.numel()));
    slabs_->allgather(x.data(), static_cast<size_t>(x.numel()), all.data());
    Tensor y({shape_[0], shape_[1], S * D, shape_[3], shape_[4]});
    for (int64_t s = 0; s < S; ++s) copy_planes(all.data() + s * x.numel(), D, 0, y.data(), S * D, s * D, D, nc, P);
    out[0] = Value::of(y.to(in[0]->t.device()));
  }
  void backward(const std::vector<const Value*>&, const std::vector<const Value*>&, const Tensor& gy_in,
                std::vector<Tensor>& gin, const std::vector<bool>& need) override {
    if (!need.at(0)) return;
    const Tensor gy = to_layout(gy_in.to(Device::cpu()), Layout::plain);
    const int64_t S = slabs_->slabs(), nc = shape_[0] * shape_[1], D = shape_[2], P = shape_[3] * shape_[4];
    Tensor gx(shape_);
    copy_planes(gy.data(), S * D, slabs_->slab() * D, gx.data(), D, 0, D, nc, P);
    if (scale_ != 1.0f)
      for (int64_t i = 0; i < gx.numel(); ++i) gx.data()[i] *= scale_;
    gin[0] = gx.to(gy_in.device());
  }

 private:
  SlabExchange* slabs_;
  float scale_;
  Shape shape_;
};

// BatchNormalization of a slab (domain "hpcnn", nn/spatial.h): training-mode statistics over the
// group's slabs together, i.e. over the whole samples. x: [N, C, Ds, H, W] fp32, plain, host.
class SlabBatchNormLayer final : public Layer {
 public:
  SlabBatchNormLayer(const onnx::NodeProto& node, SlabExchange* slabs)
      : slabs_(slabs),
        eps_(onnxu::attr_float(node, "epsilon", 1e-5f)),
        momentum_(onnxu::attr_float(node, "momentum", 0.9f)),
        training_attr_(onnxu::attr_int(node, "training_mode", 0) != 0) {
    if (onnxu::attr_int(node, "spatial", 1) != 1 || onnxu::attr_int(node, "is_test", 0) != 0)
      throw_error(ErrorKind::unsupported, "BatchNormalization on a slab with spatial = 0 or is_test");
  }
  bool keeps_input(int i) const override { return i <= 1; }
  float batchnorm_momentum() const override { return momentum_; }
  const ChannelMoments* take_batch_moments() override {
    if (!fresh_moments_) return nullptr;
    fresh_moments_ = false;
    return &moments_;
  }

  void forward(const std::vector<const Value*>& in, std::vector<Value>& out, RunContext& ctx) override {
    const Tensor x = slab_input(in, "BatchNormalization").to(Device::cpu());
    const Tensor& scale = param(in, 1), &bias = param(in, 2), &mean = param(in, 3), &var = param(in, 4);
    fresh_moments_ = false;
    if (ctx.mode != Mode::training && !training_attr_) {  // running statistics: pointwise
      out[0] = Value::of(ops::batchnorm_inference(x, scale, bias, mean, var, eps_).to(in[0]->t.device()));
      trained_ = ctx.mode == Mode::inference_grad;
      if (trained_) stats_ = ops::BatchNormStats::frozen(mean, var, eps_);
      return;
    }
    const int64_t C = x.dim(1);
    std::vector<double> sums = channel_sums(x.data(), x.data(), x.dim(0), C, x.numel() / (x.dim(0) * C), false);
    sums.push_back(static_cast<double>(x.numel() / C));  // the count, the same for every channel
    slabs_->allreduce_sum(sums.data(), sums.size());
    const double count = sums.back();
    const std::vector<double> sum(sums.begin(), sums.begin() + C), sq(sums.begin() + C, sums.begin() + 2 * C);
    stats_ = ops::BatchNormStats{Tensor({C}), Tensor({C}), Tensor({C}), count, sum, sq, false};
    std::vector<float> a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      const double m = sum[static_cast<size_t>(c)] / count;
      const double v = std::max(0.0, sq[static_cast<size_t>(c)] / count - m * m), inv = 1.0 / std::sqrt(v + eps_);
      stats_.mean.data()[c] = static_cast<float>(m);
      stats_.var.data()[c] = static_cast<float>(v);
      stats_.invstd.data()[c] = static_cast<float>(inv);
      a[static_cast<size_t>(c)] = static_cast<float>(scale.data()[c] * inv);
      b[static_cast<size_t>(c)] = static_cast<float>(bias.data()[c] - m * scale.data()[c] * inv);
    }
    out[0] = Value::of(channel_affine(x, a, b, nullptr, {}).to(in[0]->t.device()));
    moments_ = ChannelMoments::from_sums(count, sum, sq);
    fresh_moments_ = ctx.mode == Mode::training;
    trained_ = true;
  }

  void backward(const std::vector<const Value*>& in, const std::vector<const Value*>&, const Tensor& gy_in,
                std::vector<Tensor>& gin, const std::vector<bool>& need) override {
    if (!trained_) throw_error(ErrorKind::unsupported, "BatchNormalization backward after an inference-mode forward");
    const Tensor x = in[0]->t.to(Device::cpu());
    const Tensor& scale = param(in, 1);
    const Tensor gy = to_layout(gy_in.to(Device::cpu()), Layout::plain);
    if (stats_.is_frozen) {  // inference_grad: pointwise, as the whole model's
      ops::batchnorm_backward(x, scale, stats_, gy, need[0] ? &gin[0] : nullptr, need[1] ? &gin[1] : nullptr,
                              need[2] ? &gin[2] : nullptr);
      if (need[0]) gin[0] = gin[0].to(gy_in.device());
      return;
    }
    const int64_t C = x.dim(1), N = x.dim(0), inner = x.numel() / (N * C);
    // This slab's sum(gy) and sum(gy * xhat) per channel: the scale and bias gradients (partial
    // sums over the group's slabs), and, summed over the group, the input gradient's terms.
    std::vector<double> local = channel_sums(gy.data(), x.data(), N, C, inner, true);
    if (need[2]) gin[2] = to_tensor(local, 0, C);
    if (need[1]) gin[1] = to_tensor(local, C, C);
    if (!need[0]) return;
    slabs_->allreduce_sum(local.data(), local.size());
    // gx = k (gy - sum(gy)/M - xhat sum(gy xhat)/M) = k gy + u x + w per channel.
    std::vector<float> k(static_cast<size_t>(C)), u(static_cast<size_t>(C)), w(static_cast<size_t>(C));
    const double M = stats_.count;
    for (int64_t c = 0; c < C; ++c) {
      const double inv = stats_.invstd.data()[c], kc = scale.data()[c] * inv;
      const double ms = local[static_cast<size_t>(C + c)] / M * inv;
      k[static_cast<size_t>(c)] = static_cast<float>(kc);
      u[static_cast<size_t>(c)] = static_cast<float>(-kc * ms);
      w[static_cast<size_t>(c)] = static_cast<float>(kc * (-local[static_cast<size_t>(c)] / M + stats_.mean.data()[c] * ms));
    }
    gin[0] = channel_affine(x, u, w, &gy, k).to(gy_in.device());
  }

 private:
  static const Tensor& param(const std::vector<const Value*>& in, size_t i) {
    if (in.size() <= i || !in[i] || !in[i]->defined() || in[i]->is_int)
      throw_error(ErrorKind::bad_input, "BatchNormalization: input " + std::to_string(i) + " is missing or not fp32");
    return in[i]->t;
  }
  static Tensor to_tensor(const std::vector<double>& v, int64_t from, int64_t n) {
    Tensor t({n});
    for (int64_t c = 0; c < n; ++c) t.data()[c] = static_cast<float>(v[static_cast<size_t>(from + c)]);
    return t;
  }
  // Per channel of [N, C, inner] p (and q): sum p, then sum p * q, or with `centred`, sum p * xhat
  // with xhat = (q - mean) * invstd of stats_: 2C doubles.
  std::vector<double> channel_sums(const float* p, const float* q, int64_t N, int64_t C, int64_t inner, bool centred) const {
    std::vector<double> s(static_cast<size_t>(2 * C), 0.0);
#pragma omp parallel for if (N * C * inner > 16384)
    for (int64_t c = 0; c < C; ++c) {
      const double m = centred ? stats_.mean.data()[c] : 0.0, inv = centred ? stats_.invstd.data()[c] : 1.0;
      double a1 = 0, a2 = 0;
      for (int64_t n = 0; n < N; ++n) {
        const float* pr = p + (n * C + c) * inner;
        const float* qr = q + (n * C + c) * inner;
#pragma omp simd reduction(+ : a1, a2)
        for (int64_t i = 0; i < inner; ++i) {
          a1 += pr[i];
          a2 += static_cast<double>(pr[i]) * ((qr[i] - m) * inv);
        }
      }
      s[static_cast<size_t>(c)] = a1;
      s[static_cast<size_t>(C + c)] = a2;
    }
    return s;
  }
  // y = a[c] * x + b[c] (+ k[c] * g when g is given), x and g [N, C, inner] plain.
  static Tensor channel_affine(const Tensor& x, const std::vector<float>& a, const std::vector<float>& b, const Tensor* g,
                               const std::vector<float>& k) {
    Tensor y(x.shape());
    const int64_t N = x.dim(0), C = x.dim(1), inner = x.numel() / (N * C);
#pragma omp parallel for collapse(2) if (x.numel() > 16384)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t base = (n * C + c) * inner;
        const float ac = a[static_cast<size_t>(c)], bc = b[static_cast<size_t>(c)], kc = g ? k[static_cast<size_t>(c)] : 0.0f;
        const float* xp = x.data() + base;
        const float* gp = g ? g->data() + base : nullptr;
        float* yp = y.data() + base;
        if (gp) {
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yp[i] = kc * gp[i] + ac * xp[i] + bc;
        } else {
#pragma omp simd
          for (int64_t i = 0; i < inner; ++i) yp[i] = ac * xp[i] + bc;
        }
      }
    return y;
  }

  SlabExchange* slabs_;
  float eps_, momentum_;
  bool training_attr_, trained_ = false, fresh_moments_ = false;
  ops::BatchNormStats stats_;
  ChannelMoments moments_;
};

}  // namespace

}  // namespace hpcnn::nn::detail

namespace hpcnn::nn {

void SlabExchange::allreduce_sum(double* data, size_t count) {
  const size_t floats = count * sizeof(double) / sizeof(float), S = static_cast<size_t>(slabs());
  std::vector<float> mine(floats), all(S * floats);
  std::memcpy(mine.data(), data, count * sizeof(double));
  allgather(mine.data(), floats, all.data());
  std::vector<double> part(count);
  std::fill_n(data, count, 0.0);
  for (size_t s = 0; s < S; ++s) {
    std::memcpy(part.data(), all.data() + s * floats, count * sizeof(double));
    for (size_t i = 0; i < count; ++i) data[i] += part[i];
  }
}

Tensor depth_slab(const Tensor& x_in, int slab, int slabs) {
  const Tensor x = to_layout(x_in.to(Device::cpu()), Layout::plain);
  if (x.rank() != 5 || slabs < 1 || x.dim(2) % slabs != 0 || slab < 0 || slab >= slabs)
    throw_error(ErrorKind::bad_input, "slab " + std::to_string(slab) + " of " + std::to_string(slabs) + " of a batch of shape " +
                                          shape_to_string(x.shape()) + " (5-D, the depth a multiple of the slabs)");
  const int64_t n = x.dim(2) / slabs;
  Tensor y({x.dim(0), x.dim(1), n, x.dim(3), x.dim(4)});
  detail::copy_planes(x.data(), x.dim(2), slab * n, y.data(), n, 0, n, x.dim(0) * x.dim(1), x.dim(3) * x.dim(4));
  return y;
}

}  // namespace hpcnn::nn

namespace hpcnn::nn::detail {

std::unique_ptr<Layer> make_spatial_layer(const onnx::NodeProto& node, SlabExchange* slabs) {
  if (!slabs)
    throw_error(ErrorKind::usage, node.op_type() + " (domain " + kSpatialDomain +
                                      ") runs only in a model built for a spatial split (nn::ModelOptions::slabs)");
  if (node.op_type() == "HaloExchange") return std::make_unique<HaloExchangeLayer>(node, slabs);
  if (node.op_type() == "SlabGather") return std::make_unique<SlabGatherLayer>(node, slabs);
  if (node.op_type() == "BatchNormalization") return std::make_unique<SlabBatchNormLayer>(node, slabs);
  throw_error(ErrorKind::unsupported, "operator " + node.op_type() + " of domain " + kSpatialDomain + " is unknown");
}

}  // namespace hpcnn::nn::detail
