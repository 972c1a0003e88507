#include "onnx/shapes.h"

#include <onnx/shape_inference/implementation.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "onnx/graph.h"

namespace hpcnn::onnxu {
namespace {

constexpr size_t kKeepBytes = 4096;  // constants up to this size keep their data

void strip(onnx::TensorProto& t) {
  const size_t bytes = t.raw_data().size() + 4 * (t.float_data_size() + t.int32_data_size()) +
                       8 * (t.int64_data_size() + t.double_data_size() + t.uint64_data_size());
  if (bytes <= kKeepBytes) return;
  t.clear_raw_data();
  t.clear_float_data();
  t.clear_int32_data();
  t.clear_int64_data();
  t.clear_double_data();
  t.clear_uint64_data();
}

void add_shape(ShapeMap& out, const onnx::ValueInfoProto& v) {
  if (!v.type().has_tensor_type() || !v.type().tensor_type().has_shape()) return;
  Dims d;
  for (const auto& dim : v.type().tensor_type().shape().dim()) d.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  out[v.name()] = std::move(d);
}

// Shapes inside the subgraphs of `g`'s nodes, recursively; names already in `out` are kept.
void add_subgraph_shapes(ShapeMap& out, const onnx::GraphProto& g) {
  for (const auto& nd : g.node())
    for (const auto* sg : subgraphs(nd)) {
      ShapeMap inner;
      for (const auto& t : sg->initializer()) inner[t.name()] = dims_of(t);
      for (const auto& v : sg->input()) add_shape(inner, v);
      for (const auto& v : sg->value_info()) add_shape(inner, v);
      for (const auto& v : sg->output()) add_shape(inner, v);
      for (auto& [name, dims] : inner) out.emplace(name, std::move(dims));
      add_subgraph_shapes(out, *sg);
    }
}

}  // namespace

namespace {

// The model without large tensor payloads (copied piece by piece, so the copy never holds the
// weights): only dims are needed, and small constants such as Reshape targets.
onnx::ModelProto skeleton(const onnx::ModelProto& model, bool declared_outputs) {
  onnx::ModelProto skel;
  skel.set_ir_version(model.ir_version());
  *skel.mutable_opset_import() = model.opset_import();
  *skel.mutable_functions() = model.functions();
  const auto& src = model.graph();
  auto* g = skel.mutable_graph();
  *g->mutable_input() = src.input();
  *g->mutable_output() = src.output();
  if (!declared_outputs)
    for (auto& o : *g->mutable_output())
      if (o.type().has_tensor_type()) o.mutable_type()->mutable_tensor_type()->clear_shape();
  for (const auto& t : src.initializer()) {
    auto* c = g->add_initializer();
    c->set_name(t.name());
    c->set_data_type(t.data_type());
    *c->mutable_dims() = t.dims();
    const size_t bytes = t.raw_data().size() + 4 * (t.float_data_size() + t.int32_data_size()) +
                         8 * (t.int64_data_size() + t.double_data_size() + t.uint64_data_size());
    if (bytes <= kKeepBytes) c->CopyFrom(t);
  }
  for (const auto& n : src.node()) {
    auto* c = g->add_node();
    c->CopyFrom(n);
    for (auto& a : *c->mutable_attribute())
      if (a.has_t()) strip(*a.mutable_t());
  }
  return skel;
}

// Runs onnx's shape inference on the skeleton and collects the shapes.
ShapeMap infer_in_process(onnx::ModelProto& skel) {
  auto* g = skel.mutable_graph();
  try {
    onnx::ShapeInferenceOptions opts{/*check_type=*/false, /*error_mode=*/0, /*enable_data_propagation=*/true};
    onnx::shape_inference::InferShapes(skel, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    spdlog::warn("shape inference stopped early: {}", e.what());
  }
  ShapeMap out;
  for (const auto& t : g->initializer()) out[t.name()] = dims_of(t);
  for (const auto& v : g->input()) add_shape(out, v);
  for (const auto& v : g->value_info()) add_shape(out, v);
  for (const auto& v : g->output()) add_shape(out, v);
  add_subgraph_shapes(out, *g);
  return out;
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool g_isolation = true;  // set_shape_inference_isolation()

}  // namespace

void set_shape_inference_isolation(bool in_child_process) { g_isolation = in_child_process; }
bool shape_inference_isolation() { return g_isolation; }

ShapeMap infer_shapes(const onnx::ModelProto& model, bool declared_outputs) {
  onnx::ModelProto skel = skeleton(model, declared_outputs);
  if (!g_isolation) return infer_in_process(skel);  // an MPI process: no fork() (see shapes.h)
  // libonnx's shape inference can crash on malformed models (e.g. a Conv input of the wrong
  // rank in onnx 1.12), so it runs in a child process: a crash becomes a clear error here.
  int fds[2];
  if (::pipe(fds) != 0) return infer_in_process(skel);
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    return infer_in_process(skel);
  }
  if (pid == 0) {  // child: shapes as (name length, name, rank, dims) records
    ::close(fds[0]);
    const ShapeMap shapes = infer_in_process(skel);
    bool ok = true;
    for (const auto& [name, dims] : shapes) {
      const uint64_t len = name.size(), rank = dims.size();
      ok = ok && write_all(fds[1], &len, 8) && write_all(fds[1], name.data(), len) && write_all(fds[1], &rank, 8) &&
           write_all(fds[1], dims.data(), rank * 8);
    }
    ::_exit(ok ? 0 : 1);
  }
  ::close(fds[1]);
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t r = ::read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    bytes.append(buf, static_cast<size_t>(r));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw_error(ErrorKind::bad_input,
                "ONNX shape inference failed on this model (" +
                    std::string(WIFSIGNALED(status) ? "it crashed: malformed shapes or attributes?" : "no result") + ")");
  ShapeMap out;
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (n == 0) return;  // a rank-0 tensor has no dims (and dims.data() may be null)
    if (pos + n > bytes.size()) throw_error(ErrorKind::io, "shape inference result cut short");
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
  };
  while (pos < bytes.size()) {
    uint64_t len = 0, rank = 0;
    take(&len, 8);
    std::string name(len, '\0');
    take(name.data(), len);
    take(&rank, 8);
    Dims dims(rank);
    take(dims.data(), rank * 8);
    out[std::move(name)] = std::move(dims);
  }
  return out;
}

}  // namespace hpcnn::onnxu
