#include "measure/input_shape.h"

#include <set>
#include <vector>

#include "core/error.h"
#include "onnx/shapes.h"

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
  const std::vector<int64_t> have = s.dims();
  bool ok = dims.size() == static_cast<int>(have.size()) + 1;
  for (int i = 1; ok && i < dims.size(); ++i)
    if (dims[i].has_dim_value() && dims[i].dim_value() != have[static_cast<size_t>(i - 1)]) ok = false;
  if (!ok) {
    std::string shape;
    for (int64_t d : have) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
    throw_error(ErrorKind::bad_input, "the model " + model_origin + " takes '" + input->name() + "' of shape " + declared + "; the " +
                                          (s.volume() ? "volumes" : "images") + " of " + samples.origin() + " are [" + shape +
                                          (s.volume() ? "] (channels, depth, height, width)" : "] (channels, height, width)"));
  }
}

void check_output_width(const onnx::ModelProto& model, const std::string& model_origin, int64_t width,
                        const std::string& targets_origin) {
  const auto& g = model.graph();
  if (g.output_size() == 0) return;
  const onnxu::ShapeMap shapes = onnxu::infer_shapes(model);
  const auto it = shapes.find(g.output(0).name());
  if (it == shapes.end() || it->second.size() != 2 || it->second[1] < 0) return;
  if (it->second[1] != width)
    throw_error(ErrorKind::bad_input, "the model " + model_origin + " predicts " + std::to_string(it->second[1]) + " values per sample ('" +
                                          g.output(0).name() + "'); " + targets_origin + " holds " + std::to_string(width) +
                                          " targets per sample");
}

}  // namespace hpcnn::measure
