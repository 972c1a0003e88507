// Conv3d on the CPU through oneDNN's 5-D convolution primitives (forward, backward data, backward
// weights). Tensors are plain NCDHW; every primitive is created with format tag `any`, so oneDNN
// picks the layout its fastest implementation runs in (blocked nCdhw16c or ndhwc on AVX-512),
// and activations, gradients and weights are reordered into it and back.
#include <string>

#include "core/error.h"
#include "ops/cpu/dnnl_util.h"
#include "ops/cpu/kernels.h"

namespace hpcnn::ops::cpu {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

// The oneDNN twin of a 3-D Conv node: primitives kept for the last input shape.
class DnnlConv3d final : public ConvKernel {
 public:
  explicit DnnlConv3d(Conv3dParams p) : p_(std::move(p)) {}
  Tensor forward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& b, bool training) override;
  void backward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw,
                Tensor* gb) override;

 private:
  struct State {
    Shape x_shape, w_shape, y_shape;
    bool has_bias = false;
    memory::desc src_user, dst_user, wei_user, bias_md;  // the tensors' own layouts
    memory::dims strides, dilates, pad_l, pad_r;
    dnnl::convolution_forward::primitive_desc fwd_pd;
    dnnl::convolution_forward fwd;
    bool have_bwd = false;
    dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
    dnnl::convolution_backward_data bwd_data;
    dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
    dnnl::convolution_backward_weights bwd_w;
  };
  void plan(const Tensor& x, const Tensor& w, const Tensor& b, bool training);
  void plan_backward();
  Conv3dParams p_;
  std::unique_ptr<State> s_;
};

void DnnlConv3d::plan(const Tensor& x, const Tensor& w, const Tensor& b, bool training) {
  const int64_t N = x.dim(0), C = x.dim(1), M = w.dim(0), G = p_.group;
  const std::array<int64_t, 3> in{x.dim(2), x.dim(3), x.dim(4)}, k{w.dim(2), w.dim(3), w.dim(4)};
  auto s = std::make_unique<State>();
  s->x_shape = x.shape();
  s->w_shape = w.shape();
  s->has_bias = b.defined();
  const auto pads = resolve_pads<3>(p_.auto_pad, p_.pads, in, k, p_.stride, p_.dilation);
  s->y_shape = {N, M};
  for (int i = 0; i < 3; ++i) {
    const int64_t o = conv_out_size(in[i], k[i], p_.stride[i], p_.dilation[i], pads[i], pads[i + 3]);
    if (o <= 0) throw_error(ErrorKind::bad_input, "Conv output would be empty for input " + shape_to_string(x.shape()));
    s->y_shape.push_back(o);
    s->strides.push_back(p_.stride[i]);
    s->dilates.push_back(p_.dilation[i] - 1);
    s->pad_l.push_back(pads[i]);
    s->pad_r.push_back(pads[i + 3]);
  }
  s->src_user = memory::desc(memory::dims(x.shape()), dt::f32, tag::ncdhw);
  s->dst_user = memory::desc(memory::dims(s->y_shape), dt::f32, tag::ncdhw);
  const memory::dims wdims = G == 1 ? memory::dims{M, C, k[0], k[1], k[2]} : memory::dims{G, M / G, C / G, k[0], k[1], k[2]};
  s->wei_user = memory::desc(wdims, dt::f32, G == 1 ? tag::oidhw : tag::goidhw);
  s->bias_md = memory::desc({M}, dt::f32, tag::x);
  const memory::desc src_any(s->src_user.dims(), dt::f32, tag::any), dst_any(s->dst_user.dims(), dt::f32, tag::any),
      wei_any(wdims, dt::f32, tag::any);
  dnnl_call("Conv forward", [&] {
    const auto kind = training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    const auto alg = dnnl::algorithm::convolution_direct;
    auto d = s->has_bias ? dnnl::convolution_forward::desc(kind, alg, src_any, wei_any, s->bias_md, dst_any, s->strides,
                                                           s->dilates, s->pad_l, s->pad_r)
                         : dnnl::convolution_forward::desc(kind, alg, src_any, wei_any, dst_any, s->strides, s->dilates, s->pad_l,
                                                           s->pad_r);
    s->fwd_pd = dnnl::convolution_forward::primitive_desc(d, engine());
    s->fwd = dnnl::convolution_forward(s->fwd_pd);
    return 0;
  });
  s_ = std::move(s);
}

// oneDNN 2.6 has no AVX-512 backward kernel for blocked layouts when the input has few channels
// (CosmoFlow's first conv: 4 channels). For the whole volume it falls back to im2col + gemm, 3.6x
// slower than its jit kernel on channels-last (ndhwc) tensors (conv1 of CosmoFlow-32^3, batch 4, one
// thread: 18.3 ms against 5.0 ms); for a depth slab of the spatial split (no depth padding) to its
// AVX2 kernel on 8-channel blocks, 2.6x slower than the AVX-512 one on ndhwc (conv1 of
// CosmoFlow-64^3, batch 1, S = 2: 21.6 ms per slab against 16.3 ms for the whole volume). So each
// backward primitive first asks for the layout of oneDNN's choice (`any`), and when that is not a
// jit kernel of the machine's widest ISA asks again with ndhwc activations and keeps the
// implementation of the wider ISA (the reorders into ndhwc cost far less than the difference).
inline int isa_rank(const std::string& impl) {
  if (impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos) return 0;
  if (impl.find("avx512") != std::string::npos || impl.find("amx") != std::string::npos) return 3;
  if (impl.find("avx2") != std::string::npos) return 2;
  return 1;  // sse41 and other jit kernels
}

template <class Make>
auto prefer_direct(Make make) {
  auto pd = make(tag::any);
  const int rank = isa_rank(pd.impl_info_str());
  if (rank >= 3) return pd;
  try {
    auto alt = make(tag::ndhwc);
    if (isa_rank(alt.impl_info_str()) > rank) return alt;
  } catch (const dnnl::error&) {  // no implementation for ndhwc: keep the first
  }
  return pd;
}

void DnnlConv3d::plan_backward() {
  State& s = *s_;
  const memory::desc wei_any(s.wei_user.dims(), dt::f32, tag::any);
  const auto src_md = [&](tag t) { return memory::desc(s.src_user.dims(), dt::f32, t); };
  const auto dst_md = [&](tag t) { return memory::desc(s.dst_user.dims(), dt::f32, t); };
  const auto alg = dnnl::algorithm::convolution_direct;
  dnnl_call("Conv backward", [&] {
    s.bwd_data_pd = prefer_direct([&](tag t) {
      auto dd = dnnl::convolution_backward_data::desc(alg, src_md(t), wei_any, dst_md(t), s.strides, s.dilates, s.pad_l, s.pad_r);
      return dnnl::convolution_backward_data::primitive_desc(dd, engine(), s.fwd_pd);
    });
    s.bwd_data = dnnl::convolution_backward_data(s.bwd_data_pd);
    s.bwd_w_pd = prefer_direct([&](tag t) {
      auto wd = s.has_bias ? dnnl::convolution_backward_weights::desc(alg, src_md(t), wei_any, s.bias_md, dst_md(t), s.strides,
                                                                      s.dilates, s.pad_l, s.pad_r)
                           : dnnl::convolution_backward_weights::desc(alg, src_md(t), wei_any, dst_md(t), s.strides, s.dilates,
                                                                      s.pad_l, s.pad_r);
      return dnnl::convolution_backward_weights::primitive_desc(wd, engine(), s.fwd_pd);
    });
    s.bwd_w = dnnl::convolution_backward_weights(s.bwd_w_pd);
    s.have_bwd = true;
    return 0;
  });
}

// Runs `run(mem)` with a memory in `inner` and leaves its values in `out` (user layout).
template <class Fn>
void into_user(const memory::desc& inner, const memory::desc& user, float* out, Fn run) {
  memory u = wrap_memory(user, out);
  if (inner == user) return run(u);
  memory m(inner, engine());
  run(m);
  dnnl::reorder(m, u).execute(stream(), m, u);
}

Tensor DnnlConv3d::forward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& b, bool training) {
  if (x.rank() != 5)
    throw_error(ErrorKind::unsupported,
                "3-D Conv of an input of shape " + shape_to_string(x.shape()) + " (needs [N, C, D, H, W])");
  if (w.rank() != 5) throw_error(ErrorKind::bad_input, "3-D Conv weight of shape " + shape_to_string(w.shape()) + " is not 5-D");
  const int64_t C = x.dim(1), M = w.dim(0), G = p_.group;
  if (G <= 0 || C % G || M % G || w.dim(1) * G != C)
    throw_error(ErrorKind::bad_input, "Conv weight " + shape_to_string(w.shape()) + " does not match input " +
                                          shape_to_string(x.shape()) + " with group " + std::to_string(G));
  for (int i = 0; i < 3; ++i)
    if (p_.kernel[i] && p_.kernel[i] != w.dim(2 + i))
      throw_error(ErrorKind::bad_input, "Conv kernel_shape does not match the weight " + shape_to_string(w.shape()));
  if (b.defined() && (b.rank() != 1 || b.dim(0) != M))
    throw_error(ErrorKind::bad_input,
                "Conv bias of shape " + shape_to_string(b.shape()) + " for " + std::to_string(M) + " filters");
  if (!s_ || s_->x_shape != x.shape() || s_->w_shape != w.shape() || s_->has_bias != b.defined()) plan(x, w, b, training);
  const Tensor xp = to_layout(x, Layout::plain);
  Tensor y(s_->y_shape);
  dnnl_call("Conv forward", [&] {
    const State& s = *s_;
    memory src = reordered(wrap_memory(s.src_user, xp.data()), s.fwd_pd.src_desc());
    memory wei = reordered(wrap_memory(s.wei_user, w.data()), s.fwd_pd.weights_desc());
    into_user(s.fwd_pd.dst_desc(), s.dst_user, y.data(), [&](memory& dst) {
      std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
      if (s.has_bias) args[DNNL_ARG_BIAS] = wrap_memory(s.bias_md, b.data());
      s.fwd.execute(stream(), args);
    });
    stream().wait();
    return 0;
  });
  return y;
}

void DnnlConv3d::backward(ExecutionContext&, const Tensor& x, const Tensor& w, const Tensor& gy_in, Tensor* gx, Tensor* gw,
                          Tensor* gb) {
  if (!s_) throw_error(ErrorKind::usage, "Conv backward before forward");
  if (!s_->have_bwd) plan_backward();
  const State& s = *s_;
  const Tensor gy = to_layout(gy_in, Layout::plain);
  if (gy.shape() != s.y_shape)
    throw_error(ErrorKind::bad_input, "Conv output gradient of shape " + shape_to_string(gy.shape()) + " for an output of " +
                                          shape_to_string(s.y_shape));
  dnnl_call("Conv backward", [&] {
    const memory ddst_user = wrap_memory(s.dst_user, gy.data());
    if (gx) {
      *gx = Tensor(s.x_shape);
      memory ddst = reordered(ddst_user, s.bwd_data_pd.diff_dst_desc());
      memory wei = reordered(wrap_memory(s.wei_user, w.data()), s.bwd_data_pd.weights_desc());
      into_user(s.bwd_data_pd.diff_src_desc(), s.src_user, gx->data(), [&](memory& dsrc) {
        s.bwd_data.execute(stream(), {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DIFF_SRC, dsrc}});
      });
    }
    if (gw || gb) {
      Tensor gw_t(s.w_shape), gb_t = s.has_bias ? Tensor({s.w_shape[0]}) : Tensor();
      const Tensor xp = to_layout(x, Layout::plain);
      memory src = reordered(wrap_memory(s.src_user, xp.data()), s.bwd_w_pd.src_desc());
      memory ddst = reordered(ddst_user, s.bwd_w_pd.diff_dst_desc());
      into_user(s.bwd_w_pd.diff_weights_desc(), s.wei_user, gw_t.data(), [&](memory& dwei) {
        std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_WEIGHTS, dwei}};
        if (s.has_bias) args[DNNL_ARG_DIFF_BIAS] = wrap_memory(s.bias_md, gb_t.data());
        s.bwd_w.execute(stream(), args);
      });
      if (gw) *gw = gw_t;
      if (gb && s.has_bias) *gb = gb_t;
    }
    stream().wait();
    return 0;
  });
}

}  // namespace

std::unique_ptr<ConvKernel> make_conv3d(const Conv3dParams& p) { return std::make_unique<DnnlConv3d>(p); }

}  // namespace hpcnn::ops::cpu
