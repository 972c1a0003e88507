// The device-independent helpers of the op contracts: output sizes, padding, broadcasting and
// permutation arithmetic on shapes (host code for every device's kernels).
#include <algorithm>

#include "core/error.h"
#include "ops/binary.h"
#include "ops/conv.h"
#include "ops/eltwise.h"
#include "ops/shape_ops.h"

namespace hpcnn::ops {

int64_t conv_out_size(int64_t in, int64_t k, int64_t stride, int64_t dilation, int64_t pb, int64_t pe) {
  const int64_t ek = (k - 1) * dilation + 1;
  const int64_t span = in + pb + pe - ek;
  if (span < 0) return 0;
  return span / stride + 1;
}

std::array<int64_t, 4> conv_resolve_pads(const Conv2dParams& p, int64_t H, int64_t W, int64_t kH, int64_t kW) {
  if (p.auto_pad == "NOTSET" || p.auto_pad.empty()) return p.pads;
  if (p.auto_pad == "VALID") return {0, 0, 0, 0};
  std::array<int64_t, 4> pads{};
  const int64_t in[2] = {H, W}, k[2] = {kH, kW};
  for (int i = 0; i < 2; ++i) {
    const int64_t out = (in[i] + p.stride[i] - 1) / p.stride[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * p.stride[i] + (k[i] - 1) * p.dilation[i] + 1 - in[i]);
    const int64_t small = total / 2, large = total - small;
    pads[i] = p.auto_pad == "SAME_LOWER" ? large : small;
    pads[i + 2] = total - pads[i];
  }
  return pads;
}

std::array<int64_t, 6> conv3d_resolve_pads(const Conv3dParams& p, const std::array<int64_t, 3>& in,
                                           const std::array<int64_t, 3>& k) {
  if (p.auto_pad == "NOTSET" || p.auto_pad.empty()) return p.pads;
  if (p.auto_pad == "VALID") return {0, 0, 0, 0, 0, 0};
  std::array<int64_t, 6> pads{};
  for (int i = 0; i < 3; ++i) {
    const int64_t out = (in[i] + p.stride[i] - 1) / p.stride[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * p.stride[i] + (k[i] - 1) * p.dilation[i] + 1 - in[i]);
    const int64_t small = total / 2, large = total - small;
    pads[i] = p.auto_pad == "SAME_LOWER" ? large : small;
    pads[i + 3] = total - pads[i];
  }
  return pads;
}

Shape broadcast_shape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      throw_error(ErrorKind::bad_input, "shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> inverse_permutation(const std::vector<int64_t>& perm_in, int rank) {
  std::vector<int64_t> perm = perm_in;
  if (perm.empty())
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  return inv;
}

bool activation_saves_output(Activation k) { return k == Activation::relu || k == Activation::sigmoid || k == Activation::tanh; }

}  // namespace hpcnn::ops
