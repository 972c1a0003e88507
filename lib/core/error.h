// hpcnn core: the one project exception type and the exit codes of every tool.
//
// Library code throws hpcnn::Error carrying a category (which maps to the tool's exit code)
// and a message with context ("while reading initializer 'fc1.weight' of model.onnx").
// Context is added while the exception unwinds: Error::with_context() returns a copy with a
// "while ..." line appended, and with_context(context, fn) rethrows whatever fn throws so.
#pragma once

#include <stdexcept>
#include <string>

namespace hpcnn {

// Exit codes shared by every tool (see ../shared/DESIGN.md, "Errors").
enum class ErrorKind : int {
  usage = 1,        // bad flags or option values
  bad_input = 2,    // malformed or inconsistent input file
  io = 3,           // cannot open, read, write or rename a file
  unsupported = 4,  // valid input the tool does not support (operator, dtype, opset)
  device = 5,       // CUDA / NCCL / MPI failure
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return static_cast<int>(kind_); }
  // Returns a copy whose message is "<message>\n  <context>" (context reads "while ...").
  Error with_context(const std::string& context) const;

 private:
  ErrorKind kind_;
};

[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

// Runs fn(); an hpcnn::Error escaping it is rethrown with `context` appended.
template <class Fn>
decltype(auto) with_context(const std::string& context, Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw e.with_context(context);
  }
}

}  // namespace hpcnn
