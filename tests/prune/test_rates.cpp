#include <catch2/catch.hpp>

#include "core/error.h"
#include "error_check.h"
#include "prune/rates.h"

using namespace hpcnn::prune;

TEST_CASE("removed_count rounds r*C half up", "[prune]") {
  CHECK(removed_count(0.0, 64) == 0);
  CHECK(removed_count(0.1, 64) == 6);   // 6.4
  CHECK(removed_count(0.25, 10) == 3);  // 2.5 -> 3
  CHECK(removed_count(0.9, 3) == 3);    // 2.7 -> 3: would remove everything
}

TEST_CASE("pruning error and derived rate follow the definition", "[prune]") {
  // Four classes with L1 scores 4, 1, 3, 2 over 8 weight elements.
  Group g;
  g.classes = {0, 1, 2, 3};
  g.score = {4, 1, 3, 2};
  g.weight_numel = 8;
  const auto order = removal_order(g);
  CHECK(order == std::vector<int>{1, 3, 2, 0});
  CHECK(pruning_error(g, order, 0) == 0.0);
  CHECK(pruning_error(g, order, 1) == Approx(1.0 / 8));
  CHECK(pruning_error(g, order, 2) == Approx(3.0 / 8));
  CHECK(pruning_error(g, order, 3) == Approx(6.0 / 8));

  const std::vector<double> grid{0.0, 0.25, 0.5, 0.75};
  auto d = derive_rate(g, 0.4, grid);  // 0.25 -> 1 class (0.125), 0.5 -> 2 (0.375), 0.75 -> 3 (0.75)
  CHECK(d.rate == 0.5);
  CHECK(d.removed == 2);
  CHECK(d.error == Approx(0.375));
  CHECK(derive_rate(g, 0.0, grid).rate == 0.0);
  CHECK(derive_rate(g, 100.0, grid).removed == 3);  // keeps at least one class

  g.fixed_reason = "reaches a graph output";
  CHECK(derive_rate(g, 100.0, grid).removed == 0);
}

TEST_CASE("a grid must be ascending and inside [0, 1)", "[prune]") {
  CHECK_NOTHROW(validate_rate_grid(default_rate_grid()));
  using hpcnn::testing::check_error;
  check_error([] { validate_rate_grid({}); }, hpcnn::ErrorKind::usage, "empty");
  check_error([] { validate_rate_grid({0.5, 0.2}); }, hpcnn::ErrorKind::usage, "strictly ascending");
  check_error([] { validate_rate_grid({0.0, 1.0}); }, hpcnn::ErrorKind::usage, "outside [0, 1)");
  check_error([] { validate_rate_grid({-0.1}); }, hpcnn::ErrorKind::usage, "outside [0, 1)");
}
