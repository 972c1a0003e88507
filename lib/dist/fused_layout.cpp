#include "dist/fused_layout.h"

#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"

namespace hpcnn::dist {

namespace {
void check_held(const FusedLayout& l, size_t k, const char* what) {
  if (!l.dense[k] && l.positions[k].size() != l.count(k))
    throw_error(ErrorKind::usage, std::string(what) + ": the positions of sparse buffer " + std::to_string(k) +
                                      " were moved out of the layout (" + std::to_string(l.count(k)) + " kept elements)");
}

void finish(FusedLayout& l, const std::vector<size_t>& sizes) {
  l.offset.clear();
  l.total = l.full = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    l.offset.push_back(l.total);
    l.total += l.dense[k] ? sizes[k] : l.positions[k].size();
    l.full += sizes[k];
  }
}
}  // namespace

FusedLayout dense_layout(const std::vector<size_t>& sizes) {
  FusedLayout l;
  l.positions.resize(sizes.size());
  l.dense.assign(sizes.size(), true);
  finish(l, sizes);
  return l;
}

FusedLayout sparse_layout(const std::vector<std::span<const float>>& values, const std::vector<bool>& eligible,
                          const std::vector<std::span<const float>>* masks) {
  if (eligible.size() != values.size() || (masks && masks->size() != values.size()))
    throw_error(ErrorKind::bad_input, "sparse layout: " + std::to_string(values.size()) + " buffers, " +
                                          std::to_string(eligible.size()) + " eligibility flags" +
                                          (masks ? ", " + std::to_string(masks->size()) + " masks" : std::string()));
  FusedLayout l;
  l.positions.resize(values.size());
  l.dense.assign(values.size(), true);
  std::vector<size_t> sizes;
  for (size_t k = 0; k < values.size(); ++k) {
    sizes.push_back(values[k].size());
    if (!eligible[k]) continue;
    std::span<const float> m = values[k];
    if (masks) {
      if ((*masks)[k].size() != values[k].size())
        throw_error(ErrorKind::bad_input, "mask " + std::to_string(k) + " has " + std::to_string((*masks)[k].size()) +
                                              " elements, its buffer " + std::to_string(values[k].size()));
      m = (*masks)[k];
    }
    if (m.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      throw_error(ErrorKind::unsupported, "sparse layout: buffer " + std::to_string(k) + " has " + std::to_string(m.size()) +
                                              " elements; i32 positions address fewer than 2^31");
    l.dense[k] = false;
    for (size_t i = 0; i < m.size(); ++i)
      if (m[i] != 0.0f) l.positions[k].push_back(static_cast<int32_t>(i));
  }
  finish(l, sizes);
  return l;
}

void pack(const FusedLayout& l, size_t k, const float* buffer, float* fused) {
  check_held(l, k, "pack");
  float* d = fused + l.offset[k];
  if (l.dense[k]) {
    std::memcpy(d, buffer, l.count(k) * sizeof(float));
    return;
  }
  const auto& pos = l.positions[k];
  for (size_t j = 0; j < pos.size(); ++j) d[j] = buffer[pos[j]];
}

void unpack(const FusedLayout& l, size_t k, const float* fused, float* buffer) {
  check_held(l, k, "unpack");
  const float* s = fused + l.offset[k];
  if (l.dense[k]) {
    std::memcpy(buffer, s, l.count(k) * sizeof(float));
    return;
  }
  const auto& pos = l.positions[k];
  for (size_t j = 0; j < pos.size(); ++j) buffer[pos[j]] = s[j];
}

}  // namespace hpcnn::dist
