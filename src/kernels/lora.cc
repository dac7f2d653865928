#include "kernels/lora.h"

#include <algorithm>
#include <vector>

#include "kernels/ops.h"
#include "kernels/run_rows.h"

namespace koi::kernels {
namespace {

// Rows of one adapter computed together: A's and B's rows stay in L1 across the tile.
constexpr int64_t kTileRows = 8;

// One tile: up to kTileRows rows of one adapter, given by their row indices.
struct Tile {
  int32_t adapter;
  int32_t first;  // into the gathered row list
  int32_t count;
};

void tile_add(const LoraMatrices& m, const int32_t* rows, int32_t count, const float* x, int64_t in, float* y,
              int64_t out) {
  float u[kTileRows][kMaxLoraRank];
  for (int32_t r = 0; r < count; ++r) {
    const float* xr = x + rows[r] * in;
    for (int k = 0; k < m.rank; ++k) u[r][k] = m.scale * dot(xr, m.a + k * in, in);
  }
  for (int32_t r = 0; r < count; ++r) {
    float* yr = y + rows[r] * out;
    for (int k = 0; k < m.rank; ++k) axpy(u[r][k], m.bt + k * out, yr, out);
  }
}

}  // namespace

void lora_add(std::span<const LoraMatrices> adapters, const int32_t* adapter_of_row, const float* x, int64_t in,
              float* y, int64_t out, int64_t n_rows, ThreadPool* pool) {
  // Gather: the rows of each adapter, in row order, then tiles over them.
  thread_local std::vector<int32_t> rows;
  thread_local std::vector<Tile> tiles;
  rows.clear();
  tiles.clear();
  int64_t work = 0;
  for (size_t i = 0; i < adapters.size(); ++i) {
    const LoraMatrices& m = adapters[i];
    if (m.rank <= 0) continue;
    const int32_t begin = static_cast<int32_t>(rows.size());
    for (int64_t t = 0; t < n_rows; ++t) {
      if (adapter_of_row[t] == static_cast<int32_t>(i)) rows.push_back(static_cast<int32_t>(t));
    }
    const int32_t end = static_cast<int32_t>(rows.size());
    for (int32_t first = begin; first < end; first += kTileRows) {
      tiles.push_back({static_cast<int32_t>(i), first, std::min<int32_t>(kTileRows, end - first)});
    }
    work += (end - begin) * m.rank * (in + out);
  }
  if (tiles.empty()) return;
  const int32_t* row_ids = rows.data();
  const Tile* tile_list = tiles.data();
  run_rows(pool, static_cast<int64_t>(tiles.size()), work, [&](int64_t begin, int64_t end) {
    for (int64_t tile_idx = begin; tile_idx < end; ++tile_idx) {
      const Tile& tile = tile_list[tile_idx];
      tile_add(adapters[static_cast<size_t>(tile.adapter)], row_ids + tile.first, tile.count, x, in, y, out);
    }
  });
}

namespace ref {

void lora_add(std::span<const LoraMatrices> adapters, const int32_t* adapter_of_row, const float* x, int64_t in,
              float* y, int64_t out, int64_t n_rows) {
  std::vector<double> u;
  for (int64_t t = 0; t < n_rows; ++t) {
    if (adapter_of_row[t] < 0) continue;
    const LoraMatrices& m = adapters[static_cast<size_t>(adapter_of_row[t])];
    u.assign(static_cast<size_t>(m.rank), 0.0);
    for (int k = 0; k < m.rank; ++k) {
      for (int64_t i = 0; i < in; ++i) u[static_cast<size_t>(k)] += double{x[t * in + i]} * m.a[k * in + i];
      u[static_cast<size_t>(k)] *= m.scale;
    }
    for (int64_t o = 0; o < out; ++o) {
      double delta = 0.0;
      for (int k = 0; k < m.rank; ++k) delta += u[static_cast<size_t>(k)] * m.bt[k * out + o];
      y[t * out + o] = static_cast<float>(y[t * out + o] + delta);
    }
  }
}

}  // namespace ref
}  // namespace koi::kernels
