// hpcnn ops: 2-D convolution (ONNX Conv), forward and backward, on fp32 NCHW-logical tensors.
//
// x: [N, C, H, W] (nhwc or plain), w: [M, C/group, kH, kW] plain, b: [M] or undefined.
// y: [N, M, OH, OW] nhwc, OH = floor((H + pad_top + pad_bottom - ((kH-1)*dilation+1)) / stride) + 1.
// Padding is explicit here (auto_pad is resolved by conv_resolve_pads). Depthwise and grouped
// convolutions (group > 1) included. CPU twin: oneDNN's convolution primitives (direct
// algorithm, weights reordered to the layout the primitive picks). No CUDA twin yet: no build
// registers CUDA kernels for the engine (ops/kernels.h), so a tensor on a CUDA device fails with
// ErrorKind::device ("no kernels for cuda:0").
// Errors: ErrorKind::bad_input for shape mismatches (the caller adds the node name).
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

// Pads for input size (H, W) under p.auto_pad (returns p.pads for NOTSET, zeros for VALID).
std::array<int64_t, 4> conv_resolve_pads(const Conv2dParams& p, int64_t H, int64_t W, int64_t kH, int64_t kW);
int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pad_begin, int64_t pad_end);

class Conv2dKernel;

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
  std::unique_ptr<Conv2dKernel> kernel_;
};

}  // namespace hpcnn::ops
