// Conv2d on the CPU through oneDNN (convolution_forward / _backward_data / _backward_weights).
// Activations are nhwc; weights are reordered from the ONNX layout (oihw / goihw) into whatever
// layout the chosen implementation wants, and weight gradients back.
#include <cstring>

#include "core/error.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

// The oneDNN twin of a Conv node: primitives kept for the last input shape.
class DnnlConv2d final : public ConvKernel {
 public:
  explicit DnnlConv2d(Conv2dParams p) : p_(std::move(p)) {}
  Tensor forward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& b, bool training) override;
  void backward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw,
                Tensor* gb) override;

 private:
  struct State;
  Conv2dParams p_;
  std::unique_ptr<State> s_;
};

struct DnnlConv2d::State {
  Shape x_shape, w_shape;
  bool has_bias = false;
  Shape y_shape;
  memory::desc src_md, dst_md, wei_user_md, bias_md;
  memory::dims strides, dilates, pad_l, pad_r;
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  bool have_bwd = false;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
  dnnl::convolution_backward_weights bwd_w;
};

std::unique_ptr<ConvKernel> make_conv2d(const Conv2dParams& p) { return std::make_unique<DnnlConv2d>(p); }

namespace {
memory wrap(const memory::desc& md, const float* p) { return wrap_memory(md, p); }
memory as_desc(const memory& have, const memory::desc& want) { return reordered(have, want); }
}  // namespace

Tensor DnnlConv2d::forward(ExecutionContext&, const Tensor& x_in, const Tensor& w, const Tensor& b, bool training) {
  if (x_in.rank() != 4)
    throw_error(ErrorKind::unsupported,
                "Conv input of shape " + shape_to_string(x_in.shape()) + ": only 2-D convolutions (4-D inputs) are supported");
  if (w.rank() != 4) throw_error(ErrorKind::bad_input, "Conv weight of shape " + shape_to_string(w.shape()) + " is not 4-D");
  const Tensor x = to_layout(x_in, Layout::nhwc);
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t M = w.dim(0), G = p_.group, kH = w.dim(2), kW = w.dim(3);
  if (G <= 0 || C % G || M % G || w.dim(1) * G != C)
    throw_error(ErrorKind::bad_input, "Conv weight " + shape_to_string(w.shape()) + " does not match input " +
                                          shape_to_string(x.shape()) + " with group " + std::to_string(G));
  if ((p_.kernel[0] && p_.kernel[0] != kH) || (p_.kernel[1] && p_.kernel[1] != kW))
    throw_error(ErrorKind::bad_input, "Conv kernel_shape does not match the weight " + shape_to_string(w.shape()));
  if (b.defined() && (b.rank() != 1 || b.dim(0) != M))
    throw_error(ErrorKind::bad_input,
                "Conv bias of shape " + shape_to_string(b.shape()) + " for " + std::to_string(M) + " filters");
  const bool rebuild = !s_ || s_->x_shape != x.shape() || s_->w_shape != w.shape() || s_->has_bias != b.defined();
  if (rebuild) {
    auto s = std::make_unique<State>();
    s->x_shape = x.shape();
    s->w_shape = w.shape();
    s->has_bias = b.defined();
    const auto pads = resolve_pads<2>(p_.auto_pad, p_.pads, {H, W}, {kH, kW}, p_.stride, p_.dilation);
    const int64_t OH = conv_out_size(H, kH, p_.stride[0], p_.dilation[0], pads[0], pads[2]);
    const int64_t OW = conv_out_size(W, kW, p_.stride[1], p_.dilation[1], pads[1], pads[3]);
    if (OH <= 0 || OW <= 0)
      throw_error(ErrorKind::bad_input, "Conv output would be empty for input " + shape_to_string(x.shape()));
    s->y_shape = {N, M, OH, OW};
    s->strides = {p_.stride[0], p_.stride[1]};
    s->dilates = {p_.dilation[0] - 1, p_.dilation[1] - 1};
    s->pad_l = {pads[0], pads[1]};
    s->pad_r = {pads[2], pads[3]};
    s->src_md = memory::desc({N, C, H, W}, dt::f32, tag::nhwc);
    s->dst_md = memory::desc({N, M, OH, OW}, dt::f32, tag::nhwc);
    memory::dims wdims = G == 1 ? memory::dims{M, C, kH, kW} : memory::dims{G, M / G, C / G, kH, kW};
    s->wei_user_md = memory::desc(wdims, dt::f32, G == 1 ? tag::oihw : tag::goihw);
    memory::desc wei_any(wdims, dt::f32, tag::any);
    s->bias_md = memory::desc({M}, dt::f32, tag::x);
    dnnl_call("Conv forward", [&] {
      const auto kind = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
      auto d = s->has_bias ? dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, s->src_md, wei_any,
                                                             s->bias_md, s->dst_md, s->strides, s->dilates, s->pad_l, s->pad_r)
                           : dnnl::convolution_forward::desc(kind, dnnl::algorithm::convolution_direct, s->src_md, wei_any,
                                                             s->dst_md, s->strides, s->dilates, s->pad_l, s->pad_r);
      s->fwd_pd = dnnl::convolution_forward::primitive_desc(d, engine());
      s->fwd = dnnl::convolution_forward(s->fwd_pd);
      return 0;
    });
    s_ = std::move(s);
  }
  Tensor y(s_->y_shape, Layout::nhwc);
  dnnl_call("Conv forward", [&] {
    memory src = wrap(s_->src_md, x.data());
    memory wei = as_desc(wrap(s_->wei_user_md, w.data()), s_->fwd_pd.weights_desc());
    memory dst = wrap(s_->dst_md, y.data());
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
    if (s_->has_bias) args[DNNL_ARG_BIAS] = wrap(s_->bias_md, b.data());
    s_->fwd.execute(stream(), args);
    stream().wait();
    return 0;
  });
  return y;
}

void DnnlConv2d::backward(ExecutionContext&, const Tensor& x_in, const Tensor& w, const Tensor& gy_in, Tensor* gx, Tensor* gw,
                          Tensor* gb) {
  if (!s_) throw_error(ErrorKind::usage, "Conv backward before forward");
  const Tensor x = to_layout(x_in, Layout::nhwc);
  const Tensor gy = to_layout(gy_in, Layout::nhwc);
  State& s = *s_;
  if (!s.have_bwd) {
    dnnl_call("Conv backward", [&] {
      memory::desc wei_any(s.wei_user_md.dims(), dt::f32, tag::any);
      auto dd = dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, s.src_md, wei_any, s.dst_md, s.strides,
                                                      s.dilates, s.pad_l, s.pad_r);
      s.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(dd, engine(), s.fwd_pd);
      s.bwd_data = dnnl::convolution_backward_data(s.bwd_data_pd);
      auto wd = s.has_bias ? dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, s.src_md, wei_any,
                                                                      s.bias_md, s.dst_md, s.strides, s.dilates, s.pad_l, s.pad_r)
                           : dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct, s.src_md, wei_any,
                                                                      s.dst_md, s.strides, s.dilates, s.pad_l, s.pad_r);
      s.bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(wd, engine(), s.fwd_pd);
      s.bwd_w = dnnl::convolution_backward_weights(s.bwd_w_pd);
      s.have_bwd = true;
      return 0;
    });
  }
  dnnl_call("Conv backward", [&] {
    memory ddst = wrap(s.dst_md, gy.data());
    if (gx) {
      *gx = Tensor(s.x_shape, Layout::nhwc);
      memory wei = as_desc(wrap(s.wei_user_md, w.data()), s.bwd_data_pd.weights_desc());
      memory dsrc = wrap(s.src_md, gx->data());
      s.bwd_data.execute(stream(), {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc}});
    }
    if (gw || gb) {
      Tensor gw_t(s.w_shape), gb_t = s.has_bias ? Tensor({s.w_shape[0]}) : Tensor();
      memory src = wrap(s.src_md, x.data());
      memory dwei_user = wrap(s.wei_user_md, gw_t.data());
      const bool direct = s.bwd_w_pd.diff_weights_desc() == s.wei_user_md;
      memory dwei = direct ? dwei_user : memory(s.bwd_w_pd.diff_weights_desc(), engine());
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei}};
      if (s.has_bias) args[DNNL_ARG_DIFF_BIAS] = wrap(s.bias_md, gb_t.data());
      s.bwd_w.execute(stream(), args);
      if (!direct) dnnl::reorder(dwei, dwei_user).execute(stream(), dwei, dwei_user);
      if (gw) *gw = gw_t;
      if (gb && s.has_bias) *gb = gb_t;
    }
    stream().wait();
    return 0;
  });
}

}  // namespace hpcnn::ops::cpu
