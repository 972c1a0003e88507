#include "core/error.h"

namespace hpcnn {

Error Error::with_context(const std::string& context) const { return Error(kind_, std::string(what()) + "\n  " + context); }

void throw_error(ErrorKind kind, const std::string& message) { throw Error(kind, message); }

}  // namespace hpcnn
