#include "measure/input_shape.h"

#include <set>
#include <vector>

#include "core/error.h"

namespace hpcnn::measure {

void check_input_shape(const onnx::ModelProto& model, const std::string& model_origin, const data::SampleSource& samples) {
  const auto& g = model.graph();
  std::set<std::string> inits;
  for (const auto& t : g.initializer()) inits.insert(t.name());
  const onnx::ValueInfoProto* input = nullptr;
  for (const auto& vi : g.input())
    if (!inits.count(vi.name())) {
      input = &vi;
      break;
    }
  if (!input || !input->type().has_tensor_type() || !input->type().tensor_type().has_shape()) return;
  const auto& dims = input->type().tensor_type().shape().dim();
  std::string declared = "[";
  for (int i = 0; i < dims.size(); ++i)
    declared += (i ? ", " : "") + (dims[i].has_dim_value()       ? std::to_string(dims[i].dim_value())
                                   : dims[i].dim_param().empty() ? std::string("?")
                                                                 : dims[i].dim_param());
  declared += "]";
  const data::SampleInfo& s = samples.sample();
  const std::vector<int64_t> have{s.channels, s.height, s.width};
  bool ok = dims.size() == 4;
  for (int i = 1; ok && i < 4; ++i)
    if (dims[i].has_dim_value() && dims[i].dim_value() != have[static_cast<size_t>(i - 1)]) ok = false;
  if (!ok)
    throw_error(ErrorKind::bad_input, "the model " + model_origin + " takes '" + input->name() + "' of shape " + declared +
                                          "; the images of " + samples.origin() + " are [" + std::to_string(s.channels) + ", " +
                                          std::to_string(s.height) + ", " + std::to_string(s.width) +
                                          "] (channels, height, width)");
}

}  // namespace hpcnn::measure
