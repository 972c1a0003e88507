// hpcnn ops: 2-D and 3-D convolution (ONNX Conv), forward and backward, on fp32 tensors.
//
// 2-D (Conv2d):
// x: [N, C, H, W] (nhwc or plain), w: [M, C/group, kH, kW] plain, b: [M] or undefined.
// y: [N, M, OH, OW] nhwc, OH = floor((H + pad_top + pad_bottom - ((kH-1)*dilation+1)) / stride) + 1.
// Padding is explicit here (auto_pad is resolved by resolve_pads). Depthwise and grouped
// convolutions (group > 1) included. CPU twin: oneDNN's convolution primitives (direct
// algorithm, weights reordered to the layout the primitive picks). No CUDA twin yet: no build
// registers CUDA kernels for the engine (ops/kernels.h), so a tensor on a CUDA device fails with
// ErrorKind::device ("no kernels for cuda:0").
// 3-D (Conv3d, e.g. CosmoFlow's volumes): x: [N, C, D, H, W] plain (NCDHW), w: [M, C/group, kD,
// kH, kW] plain, b: [M] or undefined; y: [N, M, OD, OH, OW] plain, each output size as in 2-D.
// Pads may differ at the two ends of an axis (auto_pad SAME_* with an even kernel). CPU twin:
// oneDNN's 5-D convolution primitives; activations are reordered into the layout the primitive
// picks (tag any: blocked or channels-last ndhwc) and back, weights as in 2-D.
// Errors: ErrorKind::bad_input for shape mismatches (the caller adds the node name);
// ErrorKind::unsupported for an input of another rank.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct Conv2dParams {
  int64_t group = 1;
  std::array<int64_t, 2> kernel{0, 0};  // from w when 0
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> dilation{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // top, left, bottom, right (ONNX order: begins, ends)
  std::string auto_pad = "NOTSET";          // NOTSET, SAME_UPPER, SAME_LOWER, VALID
};

// The pads of a window (Conv or pooling) with N spatial axes for input sizes `in` and kernel
// `kernel` under `auto_pad`: `pads` for NOTSET, zeros for VALID, else the SAME padding (the odd
// one at the end for SAME_UPPER, at the beginning for SAME_LOWER). ONNX order: the N begins,
// then the N ends. Defined for N = 2 and 3.
template <size_t N>
std::array<int64_t, 2 * N> resolve_pads(const std::string& auto_pad, const std::array<int64_t, 2 * N>& pads,
                                        const std::array<int64_t, N>& in, const std::array<int64_t, N>& kernel,
                                        const std::array<int64_t, N>& stride, const std::array<int64_t, N>& dilation);
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pad_begin, int64_t pad_end);

class ConvKernel;

// One per Conv node: runs the kernels of its input's device (ops/kernels.h), which may keep
// state for the last input shape (oneDNN primitives).
class Conv2d {
 public:
  explicit Conv2d(Conv2dParams p);
  ~Conv2d();
  Conv2d(Conv2d&&) noexcept;
  Conv2d& operator=(Conv2d&&) noexcept;
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, bool training);
  // gx, gw, gb: outputs (gx/gb skipped when the pointer is null). gw/gb are plain.
  void backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw, Tensor* gb);

 private:
  Conv2dParams p_;
  Device device_;
  std::unique_ptr<ConvKernel> kernel_;
};

struct Conv3dParams {
  int64_t group = 1;
  std::array<int64_t, 3> kernel{0, 0, 0};  // kD, kH, kW; from w when 0
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> dilation{1, 1, 1};
  std::array<int64_t, 6> pads{0, 0, 0, 0, 0, 0};  // ONNX order: D, H, W begins, then D, H, W ends
  std::string auto_pad = "NOTSET";                // NOTSET, SAME_UPPER, SAME_LOWER, VALID
};

// One per 3-D Conv node, as Conv2d.
class Conv3d {
 public:
  explicit Conv3d(Conv3dParams p);
  ~Conv3d();
  Conv3d(Conv3d&&) noexcept;
  Conv3d& operator=(Conv3d&&) noexcept;
  Tensor forward(const Tensor& x, const Tensor& w, const Tensor& b, bool training);
  // gx (plain NCDHW), gw, gb: outputs (skipped when the pointer is null).
  void backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor* gx, Tensor* gw, Tensor* gb);

 private:
  Conv3dParams p_;
  Device device_;
  std::unique_ptr<ConvKernel> kernel_;
};

}  // namespace hpcnn::ops
