// The two nodes of a depth-split model (nn/spatial.h): HaloExchange and SlabGather, on slabs
// [N, C, Ds, H, W] fp32 in host memory (the CPU path; a device tensor is copied to the host and
// back).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/layer.h"
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
    Tensor y = Tensor::zeros({shape_[0], shape_[1], lo_ + D + hi_, shape_[3], shape_[4]});
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

}  // namespace

}  // namespace hpcnn::nn::detail

namespace hpcnn::nn {

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
  throw_error(ErrorKind::unsupported, "operator " + node.op_type() + " of domain " + kSpatialDomain + " is unknown");
}

}  // namespace hpcnn::nn::detail
