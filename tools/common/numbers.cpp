#include "common/numbers.h"

#include <optional>
#include <sstream>

#include "core/error.h"

namespace hpcnn::tool {

namespace {

// The number that is the whole of `text`, or nullopt.
std::optional<double> whole_number(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  return used == text.size() ? std::optional<double>(v) : std::nullopt;
}

}  // namespace

std::vector<double> parse_number_list(const std::string& text, const std::string& flag) {
  std::vector<double> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const std::optional<double> v = whole_number(item);
    if (!v) throw_error(ErrorKind::usage, flag + ": '" + item + "' is not a number");
    out.push_back(*v);
  }
  if (out.empty()) throw_error(ErrorKind::usage, flag + ": the list is empty");
  return out;
}

namespace {

CLI::Validator number_at_least(bool zero_allowed) {
  const std::string rule = zero_allowed ? ">= 0" : "> 0";
  return CLI::Validator(
      [zero_allowed, rule](std::string& text) -> std::string {
        const std::optional<double> v = whole_number(text);
        if (!v) return "'" + text + "' is not a number";
        if (zero_allowed ? !(*v >= 0) : !(*v > 0)) return "must be " + rule + ", got " + text;
        return {};
      },
      zero_allowed ? "NUMBER >= 0" : "NUMBER > 0");
}

}  // namespace

const CLI::Validator positive_number = number_at_least(false);
const CLI::Validator non_negative_number = number_at_least(true);

}  // namespace hpcnn::tool
