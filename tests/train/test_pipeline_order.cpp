// The pipeline schedules' operation orders (train/pipeline_schedule.h), checked against their
// definitions for every stage of P = 1..5 and m = P..8: each micro-batch runs forward once and
// backward once, its backward after its forward; GPipe runs all forwards first, backwards in
// reverse; 1F1B starts with min(P-1-s, m) forwards, runs backwards in micro-batch order and keeps at
// most P - s micro-batches in flight (GPipe: m).
#include <algorithm>
#include <catch2/catch.hpp>
#include <vector>

#include "core/error.h"
#include "train/pipeline_schedule.h"

using hpcnn::train::pipeline_order;

TEST_CASE("pipeline orders: GPipe and 1F1B", "[pipeline]") {
  for (int P = 1; P <= 5; ++P)
    for (int m = P; m <= 8; ++m)
      for (int s = 0; s < P; ++s)
        for (const char* name : {"gpipe", "1f1b"}) {
          INFO(name << " P " << P << " m " << m << " stage " << s);
          const auto ops = pipeline_order(name, s, P, m);
          REQUIRE(ops.size() == static_cast<size_t>(2 * m));
          std::vector<int> fwd(m, -1), bwd(m, -1);
          int in_flight = 0, peak = 0, next_backward = 0;
          for (size_t k = 0; k < ops.size(); ++k) {
            const auto& op = ops[k];
            REQUIRE(op.micro >= 0);
            REQUIRE(op.micro < m);
            if (op.forward) {
              REQUIRE(fwd[op.micro] == -1);
              fwd[op.micro] = static_cast<int>(k);
              peak = std::max(peak, ++in_flight);
            } else {
              REQUIRE(bwd[op.micro] == -1);
              REQUIRE(fwd[op.micro] >= 0);
              bwd[op.micro] = static_cast<int>(k);
              --in_flight;
              if (std::string(name) == "1f1b") REQUIRE(op.micro == next_backward++);
            }
          }
          if (std::string(name) == "gpipe") {
            for (int j = 0; j < m; ++j) {
              CHECK(fwd[j] == j);
              CHECK(bwd[j] == 2 * m - 1 - j);
            }
            CHECK(peak == m);
          } else {
            const int warm = std::min(P - 1 - s, m);
            for (int j = 0; j < warm; ++j) CHECK(fwd[j] == j);
            CHECK(peak == std::min(P - s, m));
          }
        }
  CHECK_THROWS_AS(pipeline_order("interleaved", 0, 2, 2), hpcnn::Error);
}
