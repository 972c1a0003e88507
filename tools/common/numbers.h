// hpcnn tools: comma-separated number lists on the command line ("0,0.1,0.2", "0.49,0.48,0.45").
#pragma once

#include <string>
#include <vector>

namespace hpcnn::tool {

// The numbers of `text`. ErrorKind::usage naming `flag` for an item that is not a number, or an
// empty list.
std::vector<double> parse_number_list(const std::string& text, const std::string& flag);

}  // namespace hpcnn::tool
