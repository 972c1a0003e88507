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

template <size_t N>
std::array<int64_t, 2 * N> resolve_pads(const std::string& auto_pad, const std::array<int64_t, 2 * N>& pads,
                                        const std::array<int64_t, N>& in, const std::array<int64_t, N>& kernel,
                                        const std::array<int64_t, N>& stride, const std::array<int64_t, N>& dilation) {
  if (auto_pad == "NOTSET" || auto_pad.empty()) return pads;
  std::array<int64_t, 2 * N> same{};
  if (auto_pad == "VALID") return same;
  for (size_t i = 0; i < N; ++i) {
    const int64_t out = (in[i] + stride[i] - 1) / stride[i];
    const int64_t total = std::max<int64_t>(0, (out - 1) * stride[i] + (kernel[i] - 1) * dilation[i] + 1 - in[i]);
    const int64_t small = total / 2, large = total - small;
    same[i] = auto_pad == "SAME_LOWER" ? large : small;
    same[i + N] = total - same[i];
  }
  return same;
}

template std::array<int64_t, 4> resolve_pads<2>(const std::string&, const std::array<int64_t, 4>&, const std::array<int64_t, 2>&,
                                                const std::array<int64_t, 2>&, const std::array<int64_t, 2>&,
                                                const std::array<int64_t, 2>&);
template std::array<int64_t, 6> resolve_pads<3>(const std::string&, const std::array<int64_t, 6>&, const std::array<int64_t, 3>&,
                                                const std::array<int64_t, 3>&, const std::array<int64_t, 3>&,
                                                const std::array<int64_t, 3>&);

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
