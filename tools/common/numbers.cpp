#include "common/numbers.h"

#include <sstream>

#include "core/error.h"

namespace hpcnn::tool {

std::vector<double> parse_number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) throw_error(ErrorKind::usage, flag + ": '" + item + "' is not a number");
    out.push_back(v);
  }
  if (out.empty()) throw_error(ErrorKind::usage, flag + ": the list is empty");
  return out;
}

}  // namespace hpcnn::tool
