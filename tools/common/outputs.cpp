#include "common/outputs.h"

#include <iostream>

#include "core/atomic_file.h"
#include "core/error.h"

namespace hpcnn::tool {

namespace fs = std::filesystem;

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec)) return true;
  return fs::absolute(a, ec).lexically_normal() == fs::absolute(b, ec).lexically_normal();
}

void prepare_outputs(const std::vector<Output>& outputs, const std::vector<fs::path>& inputs, bool force) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Output& o = outputs[i];
    if (o.path.empty()) continue;
    for (const auto& in : inputs)
      if (!in.empty() && same_file(o.path, in))
        throw_error(ErrorKind::usage,
                    o.what + " '" + o.path.string() + "' is the input '" + in.string() + "'; choose another path");
    for (size_t j = 0; j < i; ++j)
      if (!outputs[j].path.empty() && same_file(o.path, outputs[j].path))
        throw_error(ErrorKind::usage, o.what + " '" + o.path.string() + "' would overwrite " + outputs[j].what + " '" +
                                          outputs[j].path.string() + "'");
    check_output_target(o.path, force || o.rewritten_as_it_runs);
  }
  for (const auto& o : outputs)
    if (!o.path.empty()) create_parent_folders(o.path);
}

Report::Report(const std::string& path) {
  if (!path.empty()) file_ = std::make_unique<AtomicFile>(path, true);
}

void Report::write(const std::string& text) {
  if (!file_) {
    std::cout << text << std::flush;
    if (!std::cout) throw_error(ErrorKind::io, "cannot write the report to stdout");
    return;
  }
  file_->write(text.data(), text.size());
  file_->commit();
}

}  // namespace hpcnn::tool
