// hpcnn ops: 2-D and 3-D pooling (ONNX MaxPool, AveragePool, GlobalAveragePool), forward and
// backward.
//
// 2-D: x: [N, C, H, W] (converted to nhwc); y: [N, C, OH, OW] nhwc. 3-D: x: [N, C, D, H, W]
// plain (NCDHW); y: [N, C, OD, OH, OW] plain; the same rules per spatial axis. Output size as ONNX defines it:
// floor (or ceil with ceil_mode) of (H + pads - ((k-1)*dilation+1)) / stride + 1; with
// ceil_mode a window must start inside the input or its begin padding. AveragePool divides by
// the window clipped to the padded input (count_include_pad = 1) or to the input (0).
// MaxPool's backward sends each gradient to the first maximal element of its window.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace hpcnn::ops {

struct Pool2dParams {
  std::array<int64_t, 2> kernel{1, 1};
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> dilation{1, 1};
  std::array<int64_t, 4> pads{0, 0, 0, 0};  // top, left, bottom, right
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  bool count_include_pad = false;
};

struct Pool3dParams {
  std::array<int64_t, 3> kernel{1, 1, 1};  // D, H, W
  std::array<int64_t, 3> stride{1, 1, 1};
  std::array<int64_t, 3> dilation{1, 1, 1};
  std::array<int64_t, 6> pads{0, 0, 0, 0, 0, 0};  // D, H, W begins, then D, H, W ends
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  bool count_include_pad = false;
};

struct MaxPoolSaved {
  // Per output element: its window's maximum as an input offset within its image (2-D: h*W + w)
  // or within its channel's volume (3-D: (d*H + h)*W + w); -1 for an empty window.
  std::vector<int32_t> argmax;
};

Tensor maxpool_forward(const Tensor& x, const Pool2dParams& p, MaxPoolSaved* saved);
Tensor maxpool_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
Tensor avgpool_forward(const Tensor& x, const Pool2dParams& p);
Tensor avgpool_backward(const Shape& x_shape, const Pool2dParams& p, const Tensor& gy);
// 3-D: ErrorKind::unsupported for an input that is not 5-D; bad_input for a window larger than
// the padded input.
Tensor maxpool3d_forward(const Tensor& x, const Pool3dParams& p, MaxPoolSaved* saved);
Tensor maxpool3d_backward(const Shape& x_shape, const MaxPoolSaved& saved, const Tensor& gy);
Tensor avgpool3d_forward(const Tensor& x, const Pool3dParams& p);
Tensor avgpool3d_backward(const Shape& x_shape, const Pool3dParams& p, const Tensor& gy);
// Mean over H and W: [N, C, H, W] -> [N, C, 1, 1] (also other ranks >= 3: mean over axes 2..).
Tensor global_avgpool_forward(const Tensor& x);
Tensor global_avgpool_backward(const Tensor& x_like, const Tensor& gy);

}  // namespace hpcnn::ops
