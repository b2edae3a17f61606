// make_indexer (dim merging) and the CPU strided-run helper, against offsets computed by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>

#include <ember/kernels/cpu/loops.h>
#include <ember/kernels/strided.h>

using namespace ember;
using ember::kernels::make_indexer;

namespace {

// A tensor with only geometry (make_indexer never touches the data).
Tensor geometry(const Shape& sizes, const Shape& strides) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = sizes;
  impl->strides = strides;
  return Tensor(impl);
}

int64_t manual_offset(const Shape& sizes, const Shape& strides, int64_t i) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; --d) {
    off += (i % sizes[d]) * strides[d];
    i /= sizes[d];
  }
  return off;
}

// Random geometry: a permuted, sliced, partly expanded view of a contiguous buffer.
std::pair<Shape, Shape> random_geometry(std::mt19937_64& rng) {
  const int nd = 1 + static_cast<int>(rng() % 5);
  Shape sizes(nd), strides;
  for (auto& s : sizes) s = 1 + static_cast<int64_t>(rng() % 5);
  Shape buf = sizes;
  for (auto& s : buf) s *= 1 + static_cast<int64_t>(rng() % 2);  // room for step-2 slices
  strides = contiguous_strides(buf);
  for (int d = 0; d < nd; ++d) {
    if (buf[d] != sizes[d]) strides[d] *= 2;
    if (rng() % 6 == 0) strides[d] = 0;  // expanded
  }
  std::vector<int> perm(nd);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  Shape ps(nd), pst(nd);
  for (int d = 0; d < nd; ++d) ps[d] = sizes[perm[d]], pst[d] = strides[perm[d]];
  return {ps, pst};
}

}  // namespace

TEST_CASE("make_indexer: merges what memory allows", "[cpu]") {
  auto ix = make_indexer(geometry({3, 4, 5}, {20, 5, 1}));
  CHECK(ix.ndim == 1);
  CHECK(ix.sizes[0] == 60);
  CHECK(ix.strides[0] == 1);

  ix = make_indexer(geometry({4, 3}, {1, 4}));  // transpose: nothing merges
  CHECK(ix.ndim == 2);

  ix = make_indexer(geometry({3, 1, 4}, {4, 99, 1}));  // size-1 dims are dropped
  CHECK(ix.ndim == 1);
  CHECK(ix.sizes[0] == 12);

  ix = make_indexer(geometry({3, 4}, {8, 1}));  // row slice of a [3, 8] buffer
  CHECK(ix.ndim == 2);
  CHECK(ix.sizes[0] == 3);
  CHECK(ix.strides[0] == 8);

  ix = make_indexer(geometry({2, 3, 4}, {0, 4, 1}));  // expanded leading dim
  CHECK(ix.ndim == 2);
  CHECK(ix.sizes[0] == 2);
  CHECK(ix.strides[0] == 0);
  CHECK(ix.sizes[1] == 12);

  ix = make_indexer(geometry({}, {}));  // 0-d
  CHECK(ix.ndim == 0);
  CHECK(ix(0) == 0);
}

TEST_CASE("make_indexer: offsets match the unmerged formula on random views", "[cpu]") {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    auto [sizes, strides] = random_geometry(rng);
    auto ix = make_indexer(geometry(sizes, strides));
    INFO("sizes " << shape_str(sizes) << " strides " << shape_str(strides));
    for (int64_t i = 0; i < numel_of(sizes); ++i) REQUIRE(ix(i) == manual_offset(sizes, strides, i));
  }
}

TEST_CASE("make_indexer: too many unmergeable dims is an error", "[cpu]") {
  Shape sizes(13, 2), strides(13);
  for (int d = 0; d < 13; ++d) strides[d] = int64_t{1} << (2 * (12 - d) + 1);  // gaps everywhere
  CHECK_THROWS_WITH(make_indexer(geometry(sizes, strides)), Catch::Contains("12"));
  Shape cstrides = contiguous_strides(sizes);  // the same 13 dims, contiguous: merges to one
  CHECK(make_indexer(geometry(sizes, cstrides)).ndim == 1);
}

TEST_CASE("strided_runs: covers any begin..end range, each position naming one element in both operands", "[cpu]") {
  // Operand 1 is row-major, so its offset is the element's logical index; operand 0 has random
  // strides and sets the walk's order (make_geometry walks operand 0's memory order).
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    auto geometry = random_geometry(rng);  // not a structured binding: the lambdas below use it (clang 14)
    Shape &sizes = geometry.first, &sa = geometry.second;
    Shape sb = contiguous_strides(sizes);
    INFO("sizes " << shape_str(sizes) << " strides " << shape_str(sa));
    auto g = kernels::cpu::make_geometry<2>(sizes, {&sa, &sb});
    const int64_t n = numel_of(sizes);
    std::vector<int64_t> walk;  // the logical element at each position of the whole walk
    kernels::cpu::strided_runs(g, 0, n,
                               [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t cnt) {
                                 REQUIRE(cnt > 0);
                                 for (int64_t j = 0; j < cnt; ++j) {
                                   const int64_t k = off[1] + j * st[1];
                                   REQUIRE(off[0] + j * st[0] == manual_offset(sizes, sa, k));
                                   walk.push_back(k);
                                 }
                               });
    std::vector<int64_t> sorted = walk;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t k = 0; k < n; ++k) REQUIRE(sorted[static_cast<size_t>(k)] == k);  // every element once
    REQUIRE(static_cast<int64_t>(walk.size()) == n);
    const int64_t begin = static_cast<int64_t>(rng() % (n + 1));
    const int64_t end = begin + static_cast<int64_t>(rng() % (n - begin + 1));
    int64_t i = begin;
    kernels::cpu::strided_runs(
        g, begin, end, [&](const std::array<int64_t, 2>& off, const std::array<int64_t, 2>& st, int64_t cnt) {
          for (int64_t j = 0; j < cnt; ++j, ++i) {
            REQUIRE(off[1] + j * st[1] == walk[static_cast<size_t>(i)]);
            REQUIRE(off[0] + j * st[0] == manual_offset(sizes, sa, walk[static_cast<size_t>(i)]));
          }
        });
    REQUIRE(i == end);
  }
}

TEST_CASE("make_geometry: walks operand 0's memory order, one shared permuted layout is one run", "[cpu]") {
  const Shape sizes{2, 3, 4, 5};
  const Shape cl = strides_for(sizes, MemoryFormat::channels_last), rm = contiguous_strides(sizes);
  const auto both_cl = kernels::cpu::make_geometry<2>(sizes, {&cl, &cl});
  CHECK(both_cl.ndim == 1);  // NHWC memory in order: one unit-stride run of 120
  CHECK(both_cl.sizes[0] == 120);
  CHECK(both_cl.strides[0][0] == 1);
  const auto out_cl = kernels::cpu::make_geometry<2>(sizes, {&cl, &rm});
  CHECK(out_cl.strides[0][out_cl.ndim - 1] == 1);  // the innermost dim is the output's unit stride (C)
  CHECK(out_cl.strides[1][out_cl.ndim - 1] == 20);
  const auto out_rm = kernels::cpu::make_geometry<2>(sizes, {&rm, &cl});
  CHECK(out_rm.strides[0][out_rm.ndim - 1] == 1);  // W
  CHECK(out_rm.strides[1][out_rm.ndim - 1] == 3);
}
