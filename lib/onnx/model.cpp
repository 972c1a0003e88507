#include "onnx/model.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "onnx/graph.h"
#include "onnx/tensor.h"

namespace hpcnn::onnxu {
namespace fs = std::filesystem;
namespace {

using TP = onnx::TensorProto;

// Every tensor of the main graph that can carry data: initializers and Constant node values.
template <class Fn>
void for_each_graph_tensor(onnx::GraphProto& g, Fn&& fn) {
  for (auto& t : *g.mutable_initializer()) fn(t);
  for (auto& n : *g.mutable_node())
    for (auto& a : *n.mutable_attribute())
      if (a.has_t()) fn(*a.mutable_t());
}

// Validates an external data location: relative, without "..", inside the model's folder.
fs::path resolve_location(const fs::path& model_dir, const std::string& location) {
  fs::path loc(location);
  if (location.empty()) throw_error(ErrorKind::bad_input, "has an empty external data location");
  if (loc.is_absolute()) throw_error(ErrorKind::bad_input, "external data location '" + location + "' is absolute (refused)");
  for (const auto& part : loc)
    if (part == "..") throw_error(ErrorKind::bad_input, "external data location '" + location + "' contains '..' (refused)");
  return model_dir / loc;
}

uint64_t parse_u64(const std::string& key, const std::string& value) {
  if (value.empty() || value.find_first_not_of("0123456789") != std::string::npos)
    throw_error(ErrorKind::bad_input, "external data " + key + " '" + value + "' is not a non-negative integer");
  errno = 0;
  unsigned long long v = std::strtoull(value.c_str(), nullptr, 10);
  if (errno == ERANGE) throw_error(ErrorKind::bad_input, "external data " + key + " '" + value + "' is too large");
  return v;
}

fs::path load_external(TP& t, const fs::path& model_dir) {
  fs::path read;
  with_context("while reading external data of tensor '" + t.name() + "'", [&] {
    std::string location;
    uint64_t offset = 0;
    bool has_length = false;
    uint64_t length = 0;
    for (const auto& kv : t.external_data()) {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = parse_u64("offset", kv.value());
      else if (kv.key() == "length") {
        length = parse_u64("length", kv.value());
        has_length = true;
      }
    }
    fs::path file = resolve_location(model_dir, location);
    read = file;
    const uint64_t need = static_cast<uint64_t>(numel(t)) * element_size(t.data_type());
    if (has_length && length != need)
      throw_error(ErrorKind::bad_input, "external data length " + std::to_string(length) + " does not match shape " +
                                            dims_to_string(dims_of(t)) + " (" + std::to_string(need) + " bytes)");
    std::error_code ec;
    const uint64_t size = fs::file_size(file, ec);
    if (ec) throw_error(ErrorKind::io, "cannot open external data file '" + file.string() + "': " + ec.message());
    if (offset > size || need > size - offset)
      throw_error(ErrorKind::bad_input, "external data file '" + file.string() + "' has " + std::to_string(size) +
                                            " bytes; needs " + std::to_string(need) + " at offset " + std::to_string(offset));
    std::ifstream in(file, std::ios::binary);
    if (!in) throw_error(ErrorKind::io, "cannot open external data file '" + file.string() + "'");
    std::string raw(need, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(raw.data(), static_cast<std::streamsize>(need));
    if (!in) throw_error(ErrorKind::io, "cannot read external data file '" + file.string() + "'");
    t.set_raw_data(std::move(raw));
    t.clear_external_data();
    t.clear_data_location();
  });
  return read;
}

}  // namespace

int64_t default_opset(const onnx::ModelProto& model) {
  for (const auto& op : model.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx") return op.version();
  return 0;
}

Model load_model(const fs::path& path) {
  Model m;
  m.path = path;
  const std::string ctx = "while loading ONNX model '" + path.string() + "'";
  with_context(ctx, [&] {
    int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) throw_error(ErrorKind::io, "cannot open '" + path.string() + "': " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw_error(ErrorKind::io, "'" + path.string() + "' is a directory");
    }
    bool ok;
    {
      google::protobuf::io::FileInputStream raw(fd);
      google::protobuf::io::CodedInputStream coded(&raw);
      coded.SetTotalBytesLimit(INT_MAX);
      ok = m.proto.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
      if (raw.GetErrno() != 0) {
        ::close(fd);
        throw_error(ErrorKind::io, "cannot read '" + path.string() + "': " + std::strerror(raw.GetErrno()));
      }
    }
    ::close(fd);
    if (st.st_size == 0) throw_error(ErrorKind::bad_input, "'" + path.string() + "' is empty");
    if (!ok)
      throw_error(ErrorKind::bad_input,
                  "'" + path.string() + "' is not a valid ONNX model: protobuf parsing failed (truncated or corrupted file?)");
    if (!m.proto.has_graph() || m.proto.ir_version() <= 0 || m.proto.opset_import_size() == 0)
      throw_error(ErrorKind::bad_input, "not a valid ONNX model: missing graph, IR version or opset imports");
    const int64_t opset = default_opset(m.proto);
    if (opset != 0 && opset < kMinOpset)
      throw_error(ErrorKind::unsupported,
                  "opset " + std::to_string(opset) + " is older than the oldest supported (" + std::to_string(kMinOpset) + ")");
    if (opset > kMaxTestedOpset)
      spdlog::warn("'{}' uses opset {}; tested with opsets {} to {}", path.string(), opset, kMinOpset, kMaxTestedOpset);
    const fs::path dir = path.parent_path();
    for_each_graph_tensor(*m.proto.mutable_graph(), [&](TP& t) {
      if (t.data_location() == TP::EXTERNAL) {
        const fs::path file = fs::weakly_canonical(load_external(t, dir));
        if (std::find(m.external_files.begin(), m.external_files.end(), file) == m.external_files.end())
          m.external_files.push_back(file);
        m.had_external_data = true;
      }
    });
    GraphView view(m.proto.graph());  // validates names and references
    if (const int n = bypass_initializer_identities(m.proto); n > 0)
      spdlog::debug("'{}': {} Identity node(s) that forward an initializer bypassed", path.string(), n);
  });
  return m;
}

int bypass_initializer_identities(onnx::ModelProto& model) {
  onnx::GraphProto& g = *model.mutable_graph();
  for (const auto& n : g.node())
    for (const auto& a : n.attribute())
      if (a.has_g() || a.graphs_size() > 0) return 0;  // subgraphs may read the values: left as they are
  std::map<std::string, int> inits;                    // name -> index
  for (int i = 0; i < g.initializer_size(); ++i) inits[g.initializer(i).name()] = i;
  std::set<std::string> outputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  std::map<std::string, std::string> forwarded;  // Identity output -> the initializer it forwards
  for (const auto& n : g.node()) {
    if (n.op_type() != "Identity" || !(n.domain().empty() || n.domain() == "ai.onnx") || n.input_size() != 1 ||
        n.output_size() != 1 || outputs.count(n.output(0)) || inits.count(n.output(0)))
      continue;
    auto it = forwarded.find(n.input(0));  // a chain of Identities
    const std::string root = it != forwarded.end() ? it->second : n.input(0);
    if (inits.count(root)) forwarded[n.output(0)] = root;
  }
  if (forwarded.empty()) return 0;
  // Each forwarded value becomes an initializer of its own (a copy): the exporter may have merged
  // equal tensors (a fresh BatchNorm's scale and running_var, all ones) into one, and the tools
  // must keep them apart (one is trained, the other follows the batches).
  for (const auto& [name, root] : forwarded) {
    onnx::TensorProto copy = g.initializer(inits.at(root));
    copy.set_name(name);
    *g.add_initializer() = std::move(copy);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (auto& n : *g.mutable_node())
    if (!(n.op_type() == "Identity" && n.output_size() == 1 && forwarded.count(n.output(0)))) *kept.Add() = std::move(n);
  g.mutable_node()->Swap(&kept);
  return static_cast<int>(forwarded.size());
}

SaveOptions output_save_options(const Model& input, ExternalData requested, bool overwrite) {
  SaveOptions so;
  so.overwrite = overwrite;
  so.external_data = requested == ExternalData::automatic && input.had_external_data ? ExternalData::always : requested;
  so.protected_files = input.external_files;
  return so;
}

void save_model(onnx::ModelProto& model, const fs::path& path, const SaveOptions& options) {
  with_context("while saving ONNX model '" + path.string() + "'", [&] {
    for (const fs::path& p : {path, fs::path(path.string() + ".data")})
      for (const fs::path& keep : options.protected_files)
        if (fs::weakly_canonical(p) == keep)
          throw_error(ErrorKind::usage,
                      "'" + p.string() + "' is the input model's external data file: choose another output name");
    // Decide whether tensors go to an external data file.
    bool external = options.external_data == ExternalData::always;
    if (options.external_data == ExternalData::automatic) {
      constexpr size_t kProtobufLimit = (size_t{1} << 31) - (size_t{1} << 20);  // 2 GiB less a margin
      external = model.ByteSizeLong() > kProtobufLimit;
    }
    std::unique_ptr<AtomicFile> data_file;
    std::vector<std::pair<TP*, std::string>> moved;  // tensors whose bytes went to the data file
    auto restore = [&] {
      for (auto& [t, bytes] : moved) {
        t->clear_external_data();
        t->clear_data_location();
        t->set_raw_data(std::move(bytes));
      }
      moved.clear();
    };
    try {
      if (external) {
        const fs::path data_path = path.string() + ".data";
        const std::string location = data_path.filename().string();
        data_file = std::make_unique<AtomicFile>(data_path, options.overwrite);
        uint64_t offset = 0;
        for_each_graph_tensor(*model.mutable_graph(), [&](TP& t) {
          if (t.data_location() == TP::EXTERNAL) return;
          if (static_cast<size_t>(numel(t)) * element_size(t.data_type()) < options.external_min_bytes) return;
          ensure_raw(t);
          constexpr uint64_t kAlign = 4096;  // page-aligned offsets allow mmap
          if (offset % kAlign) {
            std::string pad(kAlign - offset % kAlign, '\0');
            data_file->write(pad.data(), pad.size());
            offset += pad.size();
          }
          const std::string& raw = t.raw_data();
          data_file->write(raw.data(), raw.size());
          auto add = [&](const char* k, const std::string& v) {
            auto* e = t.add_external_data();
            e->set_key(k);
            e->set_value(v);
          };
          add("location", location);
          add("offset", std::to_string(offset));
          add("length", std::to_string(raw.size()));
          offset += raw.size();
          moved.emplace_back(&t, std::move(*t.mutable_raw_data()));
          t.clear_raw_data();
          t.set_data_location(TP::EXTERNAL);
        });
      }
      AtomicFile out(path, options.overwrite);
      if (!model.SerializeToFileDescriptor(out.fd()))
        throw_error(ErrorKind::io, "protobuf serialization failed (model over 2 GiB without external data?)");
      if (data_file) data_file->commit();
      try {
        out.commit();
      } catch (...) {
        if (data_file) std::filesystem::remove(data_file->target());  // no half-written pair
        throw;
      }
    } catch (...) {
      restore();
      throw;
    }
    restore();
  });
}

}  // namespace hpcnn::onnxu
