#include "train/checkpoint.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hpcnn::train {

using nlohmann::json;

namespace {
constexpr char kMagic[8] = {'H', 'P', 'C', 'N', 'N', 'C', 'K', 'P'};
constexpr uint32_t kVersion = 1;
}  // namespace

void write_checkpoint(const std::string& path, const Checkpoint& c) {
  std::string model_bytes;
  if (!c.model.SerializeToString(&model_bytes)) throw_error(ErrorKind::io, "cannot serialize the model for checkpoint " + path);
  json meta{{"epoch", c.epoch},           {"step_in_epoch", c.step_in_epoch}, {"global_step", c.global_step},
            {"world_size", c.world_size}, {"batch_size", c.batch_size},       {"model_file", c.model_file},
            {"output", c.output}};
  json blobs = json::array();
  uint64_t off = 0;
  blobs.push_back({{"name", "model"}, {"offset", off}, {"size", model_bytes.size()}});
  off += model_bytes.size();
  for (const auto& [name, t] : c.optimizer_state) {
    json shape = t.shape();
    blobs.push_back({{"name", "state:" + name}, {"offset", off}, {"size", t.bytes()}, {"shape", shape}});
    off += t.bytes();
  }
  meta["blobs"] = blobs;
  const std::string text = meta.dump();
  AtomicFile f(path);
  f.write(kMagic, 8);
  f.write(&kVersion, 4);
  const uint64_t len = text.size();
  f.write(&len, 8);
  f.write(text.data(), text.size());
  f.write(model_bytes.data(), model_bytes.size());
  for (const auto& [name, t] : c.optimizer_state) {
    const Tensor p = to_layout(t, Layout::plain);
    f.write(p.data(), p.bytes());
  }
  f.commit();
}

namespace {

Checkpoint read_checkpoint_data(const std::string& path, const std::string& data, bool with_blobs) {
  auto bad = [&](const std::string& what, uint64_t at) {
    throw_error(ErrorKind::bad_input, "checkpoint " + path + ": " + what + " at byte offset " + std::to_string(at));
  };
  if (data.size() < 20 || std::memcmp(data.data(), kMagic, 8) != 0) bad("not a dist-train checkpoint (bad magic)", 0);
  uint32_t version;
  uint64_t len;
  std::memcpy(&version, data.data() + 8, 4);
  std::memcpy(&len, data.data() + 12, 8);
  if (version != kVersion) bad("unsupported version " + std::to_string(version), 8);
  if (len > data.size() - 20) bad("truncated header", 20);
  json meta;
  try {
    meta = json::parse(data.substr(20, len));
  } catch (const json::exception& e) {
    bad(std::string("corrupt header: ") + e.what(), 20);
  }
  const uint64_t base = 20 + len;
  Checkpoint c;
  try {
    c.epoch = meta.at("epoch").get<int64_t>();
    c.step_in_epoch = meta.at("step_in_epoch").get<int64_t>();
    c.global_step = meta.at("global_step").get<int64_t>();
    c.world_size = meta.at("world_size").get<int64_t>();
    c.batch_size = meta.at("batch_size").get<int64_t>();
    c.model_file = meta.value("model_file", std::string());
    c.output = meta.value("output", std::string());
    for (const auto& b : meta.at("blobs")) {
      if (!with_blobs) break;
      const std::string name = b.at("name").get<std::string>();
      const uint64_t off = b.at("offset").get<uint64_t>(), size = b.at("size").get<uint64_t>();
      if (off > data.size() - base || size > data.size() - base - off)
        bad("blob '" + name + "' runs past the end of the file", base + off);
      const char* p = data.data() + base + off;
      if (name == "model") {
        if (!c.model.ParseFromArray(p, static_cast<int>(size))) bad("corrupt model blob", base + off);
      } else if (name.rfind("state:", 0) == 0) {
        Tensor t(b.at("shape").get<Shape>());
        if (t.bytes() != size) bad("blob '" + name + "' size does not match its shape", base + off);
        std::memcpy(t.data(), p, size);
        c.optimizer_state[name.substr(6)] = t;
      }
    }
  } catch (const json::exception& e) {
    bad(std::string("corrupt header: ") + e.what(), 20);
  }
  if (c.world_size < 1 || c.batch_size < 1 || c.epoch < 0 || c.step_in_epoch < 0 || c.global_step < 0)
    bad("inconsistent training position", 20);
  return c;
}

}  // namespace

Checkpoint read_checkpoint(const std::string& path) { return read_checkpoint_data(path, read_file(path), true); }

Checkpoint read_checkpoint_header(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_error(ErrorKind::io, "cannot open checkpoint " + path);
  std::string data(20, '\0');
  f.read(data.data(), 20);
  data.resize(static_cast<size_t>(f.gcount()));
  if (data.size() == 20) {  // the JSON header too (its length is checked by the parser)
    uint64_t len;
    std::memcpy(&len, data.data() + 12, 8);
    if (len < (uint64_t{1} << 30)) {
      data.resize(20 + len);
      f.read(data.data() + 20, static_cast<std::streamsize>(len));
      data.resize(20 + static_cast<size_t>(f.gcount()));
    }
  }
  return read_checkpoint_data(path, data, false);
}

}  // namespace hpcnn::train
