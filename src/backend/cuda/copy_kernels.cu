// The copy kernel of batched copies (copy_kernels.hpp).
//
// A launch carries up to table_size copies in its parameters, so there is no
// table in memory to allocate or keep alive, and the launch can be captured.
// Each copy is cut into tiles of 16 KiB and one block copies one tile, 16
// bytes per load with `unroll` loads in flight before their stores, so that
// reads over the bus (pinned host sources) keep the link busy. The bytes
// before a destination's first 16-byte boundary and after its last go one
// by one; a source at the same offset modulo 16 makes the rest aligned on
// both sides.

#include "backend/cuda/copy_kernels.hpp"

#include <cstdint>

#include "syncmem/error.hpp"

namespace syncmem::detail {
namespace {

constexpr unsigned table_size = 160;  // 24 bytes each: within the 4 KiB of kernel parameters
constexpr unsigned block_threads = 256;
constexpr unsigned unroll = 4;
constexpr std::uint32_t vectors_per_tile = block_threads * unroll;  // 16 KiB

struct copy_table {
  std::uint32_t count;
  std::uint32_t first_tile[table_size + 1];  // the tiles of copy i: [first_tile[i], first_tile[i + 1])
  unsigned char* dst[table_size];
  const unsigned char* src[table_size];
  std::uint32_t bytes[table_size];
};
static_assert(sizeof(copy_table) <= 4096, "kernel parameters are limited to 4 KiB");

// Bytes before the first 16-byte boundary of `dst`, at most n.
__host__ __device__ std::uint32_t head_of(const void* dst, std::uint32_t n) {
  const auto head = static_cast<std::uint32_t>((16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15);
  return head < n ? head : n;
}

__host__ __device__ std::uint32_t vectors_of(const void* dst, std::uint32_t n) { return (n - head_of(dst, n)) / 16; }

std::uint32_t tiles_of(const void* dst, std::uint32_t n) {
  const std::uint32_t vectors = vectors_of(dst, n);
  return vectors == 0 ? 1 : (vectors + vectors_per_tile - 1) / vectors_per_tile;
}

__global__ void __launch_bounds__(block_threads) copy_tiles(const copy_table t) {
  const std::uint32_t tile = blockIdx.x;
  // The copy of this tile: the last i with first_tile[i] <= tile.
  std::uint32_t lo = 0, hi = t.count;
  while (hi - lo > 1) {
    const std::uint32_t mid = (lo + hi) / 2;
    if (t.first_tile[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  unsigned char* const d = t.dst[lo];
  const unsigned char* const s = t.src[lo];
  const std::uint32_t n = t.bytes[lo];
  const std::uint32_t head = head_of(d, n);
  const std::uint32_t vectors = vectors_of(d, n);
  const std::uint32_t k = tile - t.first_tile[lo];
  if (k == 0 && threadIdx.x < head) d[threadIdx.x] = s[threadIdx.x];
  if (tile + 1 == t.first_tile[lo + 1]) {
    const std::uint32_t tail_begin = head + vectors * 16;
    if (threadIdx.x < n - tail_begin) d[tail_begin + threadIdx.x] = s[tail_begin + threadIdx.x];
  }
  auto* const dv = reinterpret_cast<uint4*>(d + head);
  const auto* const sv = reinterpret_cast<const uint4*>(s + head);
  const std::uint32_t begin = k * vectors_per_tile;
  if (vectors - begin >= vectors_per_tile) {
    uint4 v[unroll];
#pragma unroll
    for (unsigned u = 0; u < unroll; ++u) v[u] = sv[begin + u * block_threads + threadIdx.x];
#pragma unroll
    for (unsigned u = 0; u < unroll; ++u) dv[begin + u * block_threads + threadIdx.x] = v[u];
  } else {
    for (std::uint32_t i = begin + threadIdx.x; i < vectors; i += block_threads) dv[i] = sv[i];
  }
}

}  // namespace

void launch_copy_kernels(void* const* dsts, const void* const* srcs, const std::size_t* sizes, std::size_t count,
                         cudaStream_t s) {
  copy_table t{};
  for (std::size_t at = 0; at < count;) {
    t.count = 0;
    std::uint32_t tiles = 0;
    for (; at < count && t.count < table_size; ++at) {
      const auto n = static_cast<std::uint32_t>(sizes[at]);
      t.dst[t.count] = static_cast<unsigned char*>(dsts[at]);
      t.src[t.count] = static_cast<const unsigned char*>(srcs[at]);
      t.bytes[t.count] = n;
      t.first_tile[t.count] = tiles;
      tiles += tiles_of(dsts[at], n);
      ++t.count;
    }
    t.first_tile[t.count] = tiles;
    copy_tiles<<<tiles, block_threads, 0, s>>>(t);
    SYNCMEM_CUDA_TRY(cudaGetLastError());
  }
}

}  // namespace syncmem::detail
