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

namespace {

CLI::Validator number_at_least(bool zero_allowed) {
  const std::string rule = zero_allowed ? ">= 0" : "> 0";
  return CLI::Validator(
      [zero_allowed, rule](std::string& text) -> std::string {
        double v = 0;
        size_t used = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) return "'" + text + "' is not a number";
        if (zero_allowed ? !(v >= 0) : !(v > 0)) return "must be " + rule + ", got " + text;
        return {};
      },
      zero_allowed ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

const CLI::Validator positive_number = number_at_least(false);
const CLI::Validator non_negative_number = number_at_least(true);

}  // namespace hpcnn::tool
