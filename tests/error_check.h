// Shared by the Catch2 tests: an error check that asserts what the tool's user sees, not only
// the exception type: the hpcnn::Error kind, hence the exit code (core/error.h), and a part of
// the message.
#pragma once

#include <catch2/catch.hpp>
#include <string>

#include "core/error.h"

namespace hpcnn::testing {

// Runs fn(); it must throw hpcnn::Error of `kind` whose message contains `text`. Returns the message.
template <class Fn>
std::string check_error(Fn&& fn, ErrorKind kind, const std::string& text = {}) {
  try {
    fn();
  } catch (const Error& e) {
    CHECK(static_cast<int>(e.kind()) == static_cast<int>(kind));
    CHECK(e.exit_code() == static_cast<int>(kind));
    CHECK_THAT(e.what(), Catch::Contains(text));
    return e.what();
  }
  FAIL("no hpcnn::Error thrown (expected exit code " << static_cast<int>(kind) << ", '" << text << "')");
  return {};
}

}  // namespace hpcnn::testing
