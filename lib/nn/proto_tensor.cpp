#include "nn/proto_tensor.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "onnx/tensor.h"

namespace hpcnn::nn {

Tensor tensor_from_proto(const onnx::TensorProto& proto) {
  const std::string what = "tensor '" + proto.name() + "'";
  const int32_t dt = proto.data_type();
  if (dt != onnx::TensorProto::FLOAT && dt != onnx::TensorProto::DOUBLE && dt != onnx::TensorProto::FLOAT16)
    throw_error(ErrorKind::unsupported, what + " has dtype " + onnxu::dtype_name(dt) + "; the engine runs fp32 only");
  if (proto.data_location() == onnx::TensorProto::EXTERNAL)
    throw_error(ErrorKind::bad_input, what + " has external data that was not loaded");
  Tensor t(onnxu::dims_of(proto));
  if (dt == onnx::TensorProto::FLOAT && !proto.raw_data().empty()) {
    if (proto.raw_data().size() != t.bytes())
      throw_error(ErrorKind::bad_input, what + " holds " + std::to_string(proto.raw_data().size()) + " bytes of data for shape " +
                                            shape_to_string(t.shape()));
    std::memcpy(t.data(), proto.raw_data().data(), t.bytes());
  } else if (dt == onnx::TensorProto::FLOAT && proto.raw_data().empty()) {
    if (proto.float_data_size() != t.numel())
      throw_error(ErrorKind::bad_input,
                  what + " holds " + std::to_string(proto.float_data_size()) + " values for shape " + shape_to_string(t.shape()));
    std::copy(proto.float_data().begin(), proto.float_data().end(), t.data());
  } else {
    std::vector<double> v = onnxu::to_doubles(proto);
    if (static_cast<int64_t>(v.size()) != t.numel())
      throw_error(ErrorKind::bad_input,
                  what + " holds " + std::to_string(v.size()) + " values for shape " + shape_to_string(t.shape()));
    for (size_t i = 0; i < v.size(); ++i) t.data()[i] = static_cast<float>(v[i]);
  }
  return t;
}

onnx::TensorProto tensor_to_proto(const Tensor& t_in, const std::string& name) {
  Tensor t = to_layout(t_in, Layout::plain);
  onnx::TensorProto p;
  p.set_name(name);
  p.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : t.shape()) p.add_dims(d);
  p.set_raw_data(std::string(reinterpret_cast<const char*>(t.data()), t.bytes()));
  return p;
}

onnx::TensorProto read_tensor_proto(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error(ErrorKind::io, "cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  onnx::TensorProto p;
  if (!p.ParseFromString(ss.str())) throw_error(ErrorKind::bad_input, path + " is not a serialized TensorProto");
  return p;
}

}  // namespace hpcnn::nn
