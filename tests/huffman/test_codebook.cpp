#include <algorithm>
#include <catch2/catch.hpp>
#include <queue>
#include <random>

#include "core/error.h"
#include "error_check.h"
#include "huffman/codebook.h"

using namespace hpcnn::huffman;
using hpcnn::ErrorKind;
using hpcnn::testing::check_error;

namespace {

// Independent reference: unlimited Huffman code lengths from a priority queue.
std::array<int, 256> huffman_lengths(const Histogram& h) {
  struct Node {
    uint64_t w;
    std::vector<int> syms;
  };
  auto cmp = [](const Node& a, const Node& b) { return a.w > b.w; };
  std::priority_queue<Node, std::vector<Node>, decltype(cmp)> q(cmp);
  for (int s = 0; s < 256; ++s)
    if (h[s]) q.push({h[s], {s}});
  std::array<int, 256> len{};
  while (q.size() > 1) {
    Node a = q.top();
    q.pop();
    Node b = q.top();
    q.pop();
    for (int s : a.syms) ++len[s];
    for (int s : b.syms) ++len[s];
    a.syms.insert(a.syms.end(), b.syms.begin(), b.syms.end());
    q.push({a.w + b.w, a.syms});
  }
  return len;
}

uint64_t cost(const Histogram& h, const CodeLengths& l) {
  uint64_t c = 0;
  for (int s = 0; s < 256; ++s) c += h[s] * l[s];
  return c;
}

uint64_t kraft16(const CodeLengths& l) {
  uint64_t k = 0;
  for (int s = 0; s < 256; ++s)
    if (l[s]) k += uint64_t{1} << (16 - l[s]);
  return k;
}

}  // namespace

TEST_CASE("package-merge equals Huffman when the limit does not bind", "[huffman]") {
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 50; ++trial) {
    Histogram h{};
    const int n = 2 + static_cast<int>(rng() % 255);
    for (int i = 0; i < n; ++i) h[rng() % 256] += 1 + rng() % 1000;
    const auto ref = huffman_lengths(h);
    if (*std::max_element(ref.begin(), ref.end()) > 16) continue;
    const CodeLengths l = limited_code_lengths(h, 16);
    uint64_t ref_cost = 0;
    for (int s = 0; s < 256; ++s) ref_cost += h[s] * ref[s];
    CHECK(cost(h, l) == ref_cost);
    CHECK(kraft16(l) == 65536);
  }
}

TEST_CASE("Fibonacci counts force the length limit and stay optimal among limited codes", "[huffman]") {
  Histogram h{};
  uint64_t a = 1, b = 1;
  for (int s = 0; s < 40; ++s) {
    h[s] = a;
    const uint64_t c = a + b;
    a = b;
    b = c;
  }
  const auto unlimited = huffman_lengths(h);
  REQUIRE(*std::max_element(unlimited.begin(), unlimited.end()) > 16);
  for (int limit : {10, 12, 16}) {
    const CodeLengths l = limited_code_lengths(h, limit);
    CHECK(*std::max_element(l.begin(), l.end()) <= limit);
    CHECK(kraft16(l) == 65536);
    // Optimal: no single move of one unit of length between two symbols lowers the cost.
    for (int x = 0; x < 40; ++x)
      for (int y = 0; y < 40; ++y) {
        if (x == y || l[x] >= limit || l[y] <= 1) continue;
        CodeLengths m = l;
        ++m[x];
        --m[y];
        if (kraft16(m) <= 65536) CHECK(cost(h, m) >= cost(h, l));
      }
  }
}

TEST_CASE("canonical codes are prefix-free and ordered by length then symbol", "[huffman]") {
  Histogram h{};
  for (int s = 0; s < 256; ++s) h[s] = 1 + (s * 7919) % 503;
  const CodeLengths l = limited_code_lengths(h, 12);
  const auto c = canonical_codes(l);
  for (int x = 0; x < 256; ++x)
    for (int y = 0; y < 256; ++y) {
      if (x == y) continue;
      if (l[x] <= l[y]) CHECK((c[y] >> (l[y] - l[x])) != c[x]);  // x is not a prefix of y
      if (l[x] == l[y] && x < y) CHECK(c[x] < c[y]);
    }
}

TEST_CASE("code-length table round trip and corruption", "[huffman]") {
  Histogram h{};
  h['a'] = 10;
  h['b'] = 3;
  h['z'] = 1;
  h[200] = 7;
  const CodeLengths l = limited_code_lengths(h, 12);
  std::vector<uint8_t> buf(code_table_size(l));
  write_code_table(l, buf.data());
  size_t used = 0;
  CHECK(read_code_table(buf.data(), buf.size(), 12, &used, "here") == l);
  CHECK(used == buf.size());
  check_error([&] { read_code_table(buf.data(), buf.size() - 1, 12, &used, "here"); }, ErrorKind::bad_input,
              "truncated code-length table here");
  check_error([&] { read_code_table(buf.data(), 31, 12, &used, "here"); }, ErrorKind::bad_input,
              "truncated code-length table here");
  auto bad = buf;
  bad[32] ^= 0x01;  // a length changes: the code is no longer complete
  check_error([&] { read_code_table(bad.data(), bad.size(), 12, &used, "in chunk 7"); }, ErrorKind::bad_input,
              "not a complete prefix code in chunk 7");
  check_error([&] { read_code_table(buf.data(), buf.size(), 2, &used, "in chunk 7"); }, ErrorKind::bad_input,
              "exceeds the limit 2 in chunk 7");
  auto one = buf;
  std::fill(one.begin(), one.begin() + 32, 0);
  one[0] = 1;
  check_error([&] { read_code_table(one.data(), one.size(), 12, &used, "here"); }, ErrorKind::bad_input,
              "code-length table with 1 symbols here");
}

TEST_CASE("limited_code_lengths refuses one symbol, limits outside 8..16 and counts from 2^56", "[huffman]") {
  Histogram h{};
  h['a'] = 5;
  check_error([&] { limited_code_lengths(h, 12); }, ErrorKind::bad_input, "at least two symbols");
  h['b'] = 1;
  check_error([&] { limited_code_lengths(h, 7); }, ErrorKind::usage, "8..16");
  check_error([&] { limited_code_lengths(h, 17); }, ErrorKind::usage, "8..16");
  h['c'] = uint64_t{1} << 56;  // its sort key (count << 8 | symbol) would overflow
  check_error([&] { limited_code_lengths(h, 12); }, ErrorKind::usage, "below 2^56");
  h['c'] = (uint64_t{1} << 56) - 1;
  CHECK(limited_code_lengths(h, 12)['c'] == 1);
}

TEST_CASE("decode tables (single and multi-symbol) agree with bit-by-bit canonical decoding", "[huffman]") {
  {
    CodeLengths two_symbols{};
    two_symbols['a'] = two_symbols['b'] = 1;
    check_error([&] { build_decode_table(two_symbols, 0); }, ErrorKind::usage, "root_bits must be 1..16");
    check_error([&] { build_decode_table(two_symbols, 17, true); }, ErrorKind::usage, "root_bits must be 1..16");
  }
  std::mt19937_64 rng(3);
  // Code shapes: many symbols of mixed counts, a geometric run (lengths 1, 2, 3, ... as in
  // images with one dominant byte: entries of three short codewords), and two symbols.
  std::vector<Histogram> shapes;
  for (int k = 0; k < 3; ++k) {
    Histogram h{};
    for (int s = 0; s < 256; ++s) h[s] = (s % 3 == 0) ? 0 : 1 + (rng() % 2000) * (rng() % 4 == 0 ? 1000 : 1);
    shapes.push_back(h);
  }
  Histogram geometric{};
  for (int s = 0; s < 40; ++s) geometric[(s * 7) % 256] = (uint64_t{1} << 40 >> s) + 1;
  shapes.push_back(geometric);
  Histogram two{};
  two['a'] = 5;
  two['b'] = 3;
  shapes.push_back(two);
  DecodeTable reused;  // rebuilt for every code: no entry may survive from the code before
  int shape = 0;
  for (const Histogram& h : shapes) {
    ++shape;
    for (int limit : {9, 12, 16}) {
      const CodeLengths l = limited_code_lengths(h, limit);
      const auto c = canonical_codes(l);
      // Reference: the symbol whose codeword is a prefix of v.
      auto first = [&](uint64_t v, int* len) {
        for (int s = 0; s < 256; ++s)
          if (l[s] && (v >> (64 - l[s])) == c[s]) {
            *len = l[s];
            return s;
          }
        return -1;
      };
      for (int K : {9, 12})
        for (bool multi : {false, true}) {
          INFO("shape " << shape << ", limit " << limit << ", K " << K << (multi ? ", multi-symbol" : ", single"));
          const DecodeTable t = build_decode_table(l, K, multi);
          build_decode_table(l, K, multi, reused);
          CHECK(reused.root == t.root);
          CHECK(reused.sub == t.sub);
          int multi_entries = 0;
          // Every root entry, each with random bits after its K (second-level lookups).
          for (uint64_t index = 0; index < (uint64_t{1} << K); ++index) {
            const uint64_t v = index << (64 - K) | rng() >> K;
            uint32_t e = t.root[v >> (64 - K)];
            if (entry_is_pointer(e)) e = t.sub[pointer_index(e) + ((v << K) >> (64 - (e & 31)))];
            const uint32_t count = entry_count(e);
            REQUIRE(count >= 1);
            if (!multi) CHECK(count == 1);
            multi_entries += count > 1;
            uint64_t rest = v;
            uint32_t used = 0;
            for (uint32_t k = 0; k < count; ++k) {
              int len = 0;
              const int sym = first(rest, &len);
              REQUIRE(sym >= 0);
              CHECK(((e >> (8 * k)) & 0xFF) == static_cast<uint32_t>(sym));
              rest <<= len;
              used += len;
            }
            CHECK(entry_bits(e) == used);
            if (count > 1) CHECK(used <= static_cast<uint32_t>(K));
            if (count < 3 && multi && used <= static_cast<uint32_t>(K)) {  // greedy: the next codeword does not fit
              int len = 0;
              first(rest, &len);
              CHECK(used + len > static_cast<uint32_t>(K));
            }
          }
          if (multi && limit == 12) CHECK(multi_entries > 0);
        }
    }
  }
}
