// Run under mpirun (any world size W >= 2; CI uses 4). The communicator's split and non-blocking
// point to point (dist/communicator.h), each rank computing the expected values itself:
//  1. split(rank % 2, rank): the even and the odd ranks form two communicators of ceil/floor(W/2)
//     ranks, ranked in world order; an allreduce in each sums only its own ranks' world ranks;
//  2. isend/irecv around the ring with two tags per neighbour, posted in the opposite order from
//     the sends: each message arrives under its own tag, with its values.
// Exit status 0 on success; prints one line per check (rank 0).
#include <cstdio>
#include <vector>

#include "dist/communicator.h"

using namespace hpcnn;

int main(int argc, char** argv) {
  auto world = dist::make_communicator(&argc, &argv);
  const int r = world->rank(), w = world->size();
  int failures = 0;
  auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "rank %d: FAILED %s\n", r, what);
      ++failures;
    }
  };
  {
    auto half = world->split(r % 2, r);
    const int n = (w + 1 - r % 2) / 2;
    expect(half->size() == n, "split size");
    expect(half->rank() == r / 2, "split rank (world order)");
    double sum = r;
    half->allreduce_sum(&sum, 1);
    double want = 0;
    for (int q = r % 2; q < w; q += 2) want += q;
    expect(sum == want, "allreduce inside the split");
    if (r == 0) std::printf("split: %d ranks in the even half, allreduce sum %.0f\n", half->size(), sum);
  }
  {
    const int next = (r + 1) % w, prev = (r + w - 1) % w;
    std::vector<float> a(1000, static_cast<float>(r)), b(7, static_cast<float>(100 + r));
    std::vector<float> ra(1000, -1), rb(7, -1);
    auto s1 = world->isend(a.data(), a.size(), next, 0);
    auto s2 = world->isend(b.data(), b.size(), next, 1);
    auto q2 = world->irecv(rb.data(), rb.size(), prev, 1);  // posted in the other order
    auto q1 = world->irecv(ra.data(), ra.size(), prev, 0);
    q2->wait();
    q1->wait();
    s1->wait();
    s2->wait();
    bool ok = true;
    for (float v : ra) ok = ok && v == static_cast<float>(prev);
    for (float v : rb) ok = ok && v == static_cast<float>(100 + prev);
    expect(ok, "isend/irecv by tag");
    bool refused = false;
    try {
      world->isend(a.data(), a.size(), r, 0);
    } catch (const std::exception&) {
      refused = true;
    }
    expect(refused, "isend to itself refused");
    if (r == 0) std::printf("isend/irecv: ring of %d ranks, tags 0 and 1 matched\n", w);
  }
  double f = failures;
  world->allreduce_sum(&f, 1);
  return f == 0 ? 0 : 1;
}
