// The hierarchical allreduce (dist/hierarchical.h) against the flat one, under mpirun with any
// world size P. The cross-node path runs on one host through the test split
// HPCNN_TEST_NODE_SPLIT=block:K | cyclic:N (mpirun -x), which the MPI communicator uses in place of
// the shared-memory split. Arguments: --nodes N --local L (the topology the launch line set up,
// checked first), --uniform 0 to expect unequal nodes (then only the refusal and the fallback
// are checked). Every rank builds every rank's input (nccl-tests style) and computes the exact
// expected sum itself:
//  1. integer-valued float and double sums: hierarchical == flat == exact, bitwise;
//  2. random floats and doubles of mixed magnitude: each within the bound of its summation tree
//     (Higham §4.2: gamma_h * sum |x|, h <= P - 1 flat, h <= L + N - 2 hierarchical) of the sum
//     in long double, hence hierarchical vs flat within (gamma_{P-1} + gamma_{L+N-2}) * sum |x|;
//  3. every rank holds the same bits (a hash of the result, gathered);
//  4. sizes 0, 1, L - 1, L + 1 and others not divisible by L; nothing written past the count;
//  5. the gradient exchange (train::GradientExchange, dense and sparse layouts) with
//     "hierarchical" equals "flat" within the bound;
//  6. the choice of exchange.algorithm (auto, flat, hierarchical; unequal nodes fall back).
// Exit status 0 on success; one line per check (rank 0). --bench COUNT only times both algorithms
// (--rounds R alternating rounds of 21 calls each) and prints what exchange.algorithm auto picks.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/hierarchical.h"
#include "train/gradient_exchange.h"

using namespace hpcnn;

namespace {

// Rank r's value i: integer-valued in [-1000, 1000] (sums over <= 8000 ranks stay exact in float).
double int_value(int r, size_t i) { return static_cast<double>((r * 7919 + static_cast<int64_t>(i) * 104729) % 2001) - 1000; }

// Rank r's random values: uniform in [-1, 1] times 2^k, k uniform in [-10, 10] (mixed magnitudes,
// so that the summation order shows in the last bits).
template <class T>
std::vector<T> random_values(int r, size_t n, unsigned seed) {
  std::mt19937_64 rng(seed * 1000003u + static_cast<unsigned>(r));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::uniform_int_distribution<int> e(-10, 10);
  std::vector<T> v(n);
  for (auto& x : v) x = static_cast<T>(std::ldexp(u(rng), e(rng)));
  return v;
}

template <class T>
uint64_t hash_of(const std::vector<T>& v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

double gamma_h(int h, double u) { return h * u / (1 - h * u); }

template <class T>
constexpr double unit_roundoff() {
  return std::numeric_limits<T>::epsilon() / 2;  // 2^-24 float, 2^-53 double
}

}  // namespace

int main(int argc, char** argv) {
  auto comm = dist::make_communicator(&argc, &argv);
  const int rank = comm->rank(), P = comm->size();
  int want_nodes = -1, want_local = -1, want_uniform = 1;
  size_t bench_count = 0;  // --bench COUNT: only time both algorithms on COUNT floats (no checks)
  int bench_rounds = 2;    // --rounds R: alternating rounds of flat and hierarchical
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--nodes") want_nodes = std::atoi(argv[i + 1]);
    if (a == "--local") want_local = std::atoi(argv[i + 1]);
    if (a == "--uniform") want_uniform = std::atoi(argv[i + 1]);
    if (a == "--bench") bench_count = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--rounds") bench_rounds = std::max(1, std::atoi(argv[i + 1]));
  }
  int failures = 0;
  auto report = [&](bool ok, const std::string& what) {
    int64_t bad = ok ? 0 : 1;
    comm->allreduce_max(&bad, 1);
    if (rank == 0) std::printf("%s: %s\n", bad ? "FAIL" : "ok", what.c_str());
    std::fflush(stdout);
    failures += static_cast<int>(bad);
  };
  auto same_everywhere = [&](uint64_t h) {
    for (uint64_t other : comm->allgather(h))
      if (other != h) return false;
    return true;
  };
  if (bench_count > 0) {
    // The median over 21 calls of the slowest rank's time, after 3 warm-up calls.
    std::vector<float> v(bench_count, 1.0f);
    for (int round = 0; round < 2 * bench_rounds; ++round) {
      const char* name = round % 2 == 0 ? "flat" : "hierarchical";
      const auto algo = std::string(name) == "flat" ? dist::SumAlgorithm::flat : dist::SumAlgorithm::hierarchical;
      std::vector<double> t;
      for (int i = 0; i < 24; ++i) {
        comm->barrier();
        const auto t0 = std::chrono::steady_clock::now();
        dist::allreduce_sum(*comm, v.data(), v.size(), algo);
        int64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
        comm->allreduce_max(&ns, 1);
        if (i >= 3) t.push_back(static_cast<double>(ns) * 1e-6);
      }
      std::sort(t.begin(), t.end());
      if (rank == 0)
        std::printf("%s: %zu floats, %d ranks, %d node(s): median %.3f ms (min %.3f, max %.3f)\n", name, bench_count, P,
                    comm->node_count(), t[t.size() / 2], t.front(), t.back());
    }
    const dist::SumChoice a = dist::choose_sum_algorithm_measured("auto", *comm, v.data(), v.size());
    if (rank == 0) std::printf("auto: %s (%s)\n", dist::to_string(a.algorithm), a.reason.c_str());
    return 0;
  }
  try {
    const int N = comm->node_count(), L = comm->local_size();
    int64_t largest = L;  // the largest node's rank count
    comm->allreduce_max(&largest, 1);
    report((want_nodes < 0 || N == want_nodes) && (want_local < 0 || largest == want_local) &&
               comm->nodes_uniform() == (want_uniform != 0),
           "topology: " + std::to_string(P) + " ranks, " + std::to_string(N) + " node(s) of at most " + std::to_string(largest) +
               " ranks, " + (comm->nodes_uniform() ? "equal" : "unequal"));

    // 6. the choice (pure; the same on every rank).
    {
      using dist::SumAlgorithm;
      const auto a = dist::choose_sum_algorithm("auto", 2, 4, true);
      const auto b = dist::choose_sum_algorithm("auto", 1, 4, true);
      const auto c = dist::choose_sum_algorithm("auto", 4, 1, true);
      const auto d = dist::choose_sum_algorithm("hierarchical", 2, 2, false);
      const auto e = dist::choose_sum_algorithm("auto", 2, 2, false);
      const auto f = dist::choose_sum_algorithm("hierarchical", 1, 4, true);
      const auto g = dist::choose_sum_algorithm("flat", 2, 4, true);
      bool refused = false;
      try {
        dist::choose_sum_algorithm("ring", 2, 2, true);
      } catch (const Error& err) {
        refused = err.kind() == ErrorKind::usage && std::string(err.what()).find("flat, hierarchical, auto") != std::string::npos;
      }
      report(
          a.algorithm == SumAlgorithm::hierarchical && b.algorithm == SumAlgorithm::flat && c.algorithm == SumAlgorithm::flat &&
              d.algorithm == SumAlgorithm::flat && d.warning && e.algorithm == SumAlgorithm::flat && !e.warning &&
              f.algorithm == SumAlgorithm::hierarchical && g.algorithm == SumAlgorithm::flat && refused,
          "choice: auto = hierarchical only with > 1 node and > 1 rank per node ('" + a.reason + "'; '" + b.reason + "'; '" +
              c.reason + "'); hierarchical on unequal nodes = flat with a warning ('" + d.reason + "'); unknown names refused");
    }

    if (!comm->nodes_uniform()) {
      bool refused = false;
      std::vector<float> v(10, 1.0f);
      try {
        comm->hierarchical_allreduce_sum(v.data(), v.size());
      } catch (const Error& err) {
        refused = err.kind() == ErrorKind::usage && std::string(err.what()).find("unequal") != std::string::npos;
      }
      const auto choice = dist::choose_sum_algorithm("hierarchical", *comm);
      report(refused && choice.algorithm == dist::SumAlgorithm::flat && choice.warning,
             "unequal nodes: the hierarchical allreduce refuses on every rank (ErrorKind::usage), exchange.algorithm "
             "hierarchical falls back to flat with a warning");
      comm->allreduce_sum(v.data(), v.size());
      report(v[0] == static_cast<float>(P), "unequal nodes: the flat allreduce still runs");
      return failures ? 1 : 0;
    }

    const auto Ls = static_cast<size_t>(L);
    std::vector<size_t> sizes = {0, 1, 2, 3, Ls - 1, Ls, Ls + 1, 2 * Ls + 1, 7, 1000, 1001, 65537, (size_t{1} << 20) + 3};
    const int h_flat = P - 1, h_hier = (L - 1) + (N - 1);

    // 1, 3, 4: integer-valued sums, bitwise.
    auto integer_case = [&]<class T>(T, const char* type) {
      bool exact = true, equal = true, untouched = true;
      uint64_t combined = 0;
      for (size_t n : sizes) {
        std::vector<T> hier(n + 1), flat(n + 1), want(n, 0);
        for (size_t i = 0; i < n; ++i) {
          hier[i] = flat[i] = static_cast<T>(int_value(rank, i));
          double s = 0;
          for (int r = 0; r < P; ++r) s += int_value(r, i);
          want[i] = static_cast<T>(s);
        }
        hier[n] = flat[n] = static_cast<T>(12345);  // past the count: must stay
        comm->hierarchical_allreduce_sum(hier.data(), n);
        comm->allreduce_sum(flat.data(), n);
        untouched = untouched && hier[n] == static_cast<T>(12345) && flat[n] == static_cast<T>(12345);
        hier.pop_back();
        flat.pop_back();
        exact = exact && std::memcmp(hier.data(), want.data(), n * sizeof(T)) == 0;
        equal = equal && std::memcmp(hier.data(), flat.data(), n * sizeof(T)) == 0;
        combined = combined * 31 + hash_of(hier);
      }
      report(exact && equal && untouched && same_everywhere(combined),
             std::string("integer-valued ") + type +
                 " sums: hierarchical == flat == exact, bitwise, on every rank; sizes 0, 1, " +
                 "L-1, L+1, ... up to 2^20+3; nothing written past the count");
    };
    integer_case(float{}, "float");
    integer_case(double{}, "double");

    // 2, 3: random values, within the bound.
    auto random_case = [&]<class T>(T, const char* type) {
      const double u = unit_roundoff<T>();
      bool within = true, identical = true;
      double worst_hier = 0, worst_flat = 0, worst_diff = 0;  // |error| / sum |x|
      size_t differing = 0, total = 0;
      unsigned seed = 1;
      for (size_t n : sizes) {
        std::vector<std::vector<T>> all(static_cast<size_t>(P));
        for (int r = 0; r < P; ++r) all[static_cast<size_t>(r)] = random_values<T>(r, n, seed);
        ++seed;
        std::vector<T> hier = all[static_cast<size_t>(rank)], flat = hier;
        comm->hierarchical_allreduce_sum(hier.data(), n);
        comm->allreduce_sum(flat.data(), n);
        for (size_t i = 0; i < n; ++i) {
          long double exact = 0, abs_sum = 0;
          for (int r = 0; r < P; ++r) {
            exact += all[static_cast<size_t>(r)][i];
            abs_sum += std::fabs(static_cast<long double>(all[static_cast<size_t>(r)][i]));
          }
          // The long double reference's own error (64-bit significand: P * 2^-64 relative) is far below u.
          const double a = static_cast<double>(abs_sum), slack = 4.0 * P * std::ldexp(1.0, -64) * a;
          const double eh = std::fabs(static_cast<double>(hier[i] - exact)), ef = std::fabs(static_cast<double>(flat[i] - exact));
          const double ed = std::fabs(static_cast<double>(hier[i]) - static_cast<double>(flat[i]));
          within = within && eh <= gamma_h(h_hier, u) * a + slack && ef <= gamma_h(h_flat, u) * a + slack &&
                   ed <= (gamma_h(h_flat, u) + gamma_h(h_hier, u)) * a;
          if (a > 0) {
            worst_hier = std::max(worst_hier, eh / a);
            worst_flat = std::max(worst_flat, ef / a);
            worst_diff = std::max(worst_diff, ed / a);
          }
          differing += hier[i] != flat[i];
        }
        total += n;
        identical = identical && same_everywhere(hash_of(hier)) && same_everywhere(hash_of(flat));
      }
      char msg[512];
      std::snprintf(msg, sizeof msg,
                    "random %s sums within the bound (|hier - exact| <= gamma_%d sum|x|, |flat - exact| <= gamma_%d sum|x|, "
                    "|hier - flat| <= %.3g sum|x|); worst seen on rank 0 (in units of u): hier %.2f, flat %.2f, diff %.2f; "
                    "%zu of %zu elements differ from flat; identical on every rank",
                    type, h_hier, h_flat, gamma_h(h_flat, u) + gamma_h(h_hier, u), worst_hier / u, worst_flat / u, worst_diff / u,
                    differing, total);
      report(within && identical, msg);
    };
    random_case(float{}, "float");
    random_case(double{}, "double");

    // 5. the gradient exchange, dense and sparse, through exchange.algorithm.
    {
      auto params_of = [&](int r) {
        std::vector<nn::Parameter> ps;
        const std::vector<Shape> shapes = {{8, 3, 3, 3}, {8}, {10, 37}, {10}, {5, 7}};
        unsigned s = 100;
        for (const auto& shape : shapes) {
          nn::Parameter p{"p" + std::to_string(s), Tensor(shape), Tensor(shape), false};
          const auto v = random_values<float>(0, static_cast<size_t>(p.value.numel()), s);      // same weights everywhere
          const auto g = random_values<float>(r, static_cast<size_t>(p.value.numel()), s + 1);  // rank r's gradient
          for (int64_t i = 0; i < p.value.numel(); ++i) {
            p.value.data()[i] = i % 3 == 0 ? v[static_cast<size_t>(i)] : 0.0f;  // a third non-zero: sparse layouts
            p.grad.data()[i] = g[static_cast<size_t>(i)];
          }
          ps.push_back(std::move(p));
          s += 2;
        }
        return ps;
      };
      auto params = params_of(rank);
      std::vector<std::vector<nn::Parameter>> everyone;
      for (int r = 0; r < P; ++r) everyone.push_back(params_of(r));
      const double u = unit_roundoff<float>();
      const double bound = gamma_h(h_flat, u) + gamma_h(h_hier, u);
      for (bool sparse : {false, true}) {
        auto layout = train::parameter_layout(params, sparse);
        train::GradientExchange hier(*comm, layout, Device::cpu(), "hierarchical");
        train::GradientExchange flat(*comm, layout, Device::cpu(), "flat");
        hier.exchange(params, 2);
        flat.exchange(params, 2);
        // The fused buffer's element j of rank r, to bound each element by sum |x| / (P * 2).
        std::vector<double> abs_sum(layout.total, 0);
        std::vector<float> fused(layout.total);
        for (int r = 0; r < P; ++r)
          for (size_t k = 0; k < layout.dense.size(); ++k) {
            dist::pack(layout, k, everyone[static_cast<size_t>(r)][k].grad.data(), fused.data());
            for (size_t j = layout.offset[k]; j < layout.offset[k] + layout.count(k); ++j) abs_sum[j] += std::fabs(fused[j]);
          }
        bool within = hier.algorithm().algorithm == dist::SumAlgorithm::hierarchical &&
                      flat.algorithm().algorithm == dist::SumAlgorithm::flat;
        for (size_t j = 0; j < layout.total; ++j) {
          const double a = abs_sum[j] / (2.0 * P);
          // The scale by c = fl(1 / (2P)) rounds once more in each (u relative to each result; c itself
          // is within u of 1 / (2P)).
          const double d = std::fabs(static_cast<double>(hier.fused().data()[j]) - flat.fused().data()[j]);
          within = within && d <= bound * a * (1 + 4 * u) + 3 * u * std::fabs(flat.fused().data()[j]);
        }
        std::vector<float> mine(hier.fused().data(), hier.fused().data() + layout.total);
        report(within && same_everywhere(hash_of(mine)),
               std::string("gradient exchange (") + (sparse ? "sparse, " : "dense, ") + std::to_string(layout.total) + " of " +
                   std::to_string(layout.full) + " values): hierarchical == flat within the bound, identical on every rank");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", rank, e.what());
    comm->abort(1);
  }
  return failures ? 1 : 0;
}
