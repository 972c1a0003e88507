// hpcnn tools: numbers on the command line: comma-separated lists ("0,0.1,0.2", "0.49,0.48,0.45")
// and the checks of single numbers.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace hpcnn::tool {

// The numbers of `text`. ErrorKind::usage naming `flag` for an item that is not a number, or an
// empty list.
std::vector<double> parse_number_list(const std::string& text, const std::string& flag);

// CLI11 checks of a flag's number with a plain message ("must be > 0, got 0"; CLI::PositiveNumber
// says "not in range 0.000000 to 1797693134862315...").
extern const CLI::Validator positive_number, non_negative_number;

}  // namespace hpcnn::tool
