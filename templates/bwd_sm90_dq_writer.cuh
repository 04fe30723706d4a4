// The sm90 backward's dQ writer (bwd_sm90.cuh, kDQStaged): a warp of the
// producer warpgroup that hands each consumer warpgroup's staged part of
// dQ to the TMA unit, a reduce-add into the fp32 accumulator, so the
// consumers only store to shared memory and arrive, never wait for each
// other or for the issue. In the deterministic mode two writers take the
// tiles in turn and add a tile's parts in the key blocks' order
// (BwdParams::dq_semaphore).
#pragma once

#include "bwd_sm90_layout.cuh"
#include "bwd_sm90_work.cuh"
#include "common/bwd_params.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

// The deterministic dQ order's semaphores (BwdParams::dq_semaphore): an
// acquire load, a release add, and a short sleep between polls.
__device__ __forceinline__ int load_acquire(const int *src) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(src) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_add(int *dst, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(dst), "r"(v) : "memory");
}
__device__ __forceinline__ void nanosleep(unsigned ns) {
  asm volatile("nanosleep.u32 %0;\n" ::"r"(ns));
}
// Orders this thread's global accesses across the generic and async (TMA)
// proxies: completed bulk writes before a later release, an acquire before
// later bulk operations.
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// The writer on warp `tid / 32` of the producer warpgroup. Its barrier
// phases: one "free" per warpgroup up front (the writer of the CTA's tile
// -1), then per tile of its own "full" in and "free" out.
__device__ __forceinline__ void write_dq(const BwdParams &p, const TmaDescriptor &tma_dq_accum,
                                        u32 smem, const Barriers &bars,
                                        const QueryTileWalk &walk, int tid) {
  const int lane = tid % 32;
  const int writer = kDQWriters == 2 ? tid / 32 - 1 : 0;
  const int full_id = kBarrierDQFull + 4 * writer, free_id = kBarrierDQFree + 4 * writer;
  if (writer == dq_writer_of(~0u)) {
#pragma unroll
    for (int wg = 0; wg < 2; ++wg) named_barrier_arrive(free_id + wg, kDQBarrierThreads);
  }
  for (WorkPosition at;; at.next_item()) {
    const int item = read_item(p, bars, at.items());
    if (item >= p.work_items) break;
    // A lambda below captures them: no structured binding.
    const WorkKeys keys = Scheduler::keys_of(p, item);
    const int n0 = keys.n0, kv_head = keys.kv_head, batch = keys.batch;
    const Sequence seq(p, batch);
    const QueryTiles tiles = walk.query_tiles(seq, n0, batch, kv_head);
    const int iterations = tiles.iterations;
    for (int it = 0; it < iterations; ++it) {
      if (dq_writer_of(at.tiles() + it) != writer) continue;
      const int head = kv_head * p.heads_per_kv + walk.tile_head(tiles, it);
      const int m_block = entry_m_block(walk.tile_entry(tiles, it));
      const int m0 = m_block * kBlockM;
      // The accumulator's row of query q of `head`.
      auto accum_row = [&](int q) {
        return kVarlen ? seq.workspace_row(p, head, q)
                       : (static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + q;
      };
      if constexpr (kDeterministic) {
        // A tile's dQ goes in after that of every key block before this
        // one in the tile's order that sees the tile, always in that order
        // (so the fp32 sums are the same every run): wait until the tile's
        // semaphore has counted them. The order is the dispatch order of a
        // section's key blocks (first first, or where p.shortest_first last
        // first): they were dispatched before this CTA, so they never wait
        // for it. Longest first, each walks its tiles last first and so
        // reaches a shared tile no later in its walk than this CTA does;
        // shortest first, first first and so no later either (under a
        // causal mask over as many queries as keys, a step or more earlier)
        // (Scheduler::keys_of, QueryTileWalk).
        const int seqlen_k = kVarlen ? seq.seqlen_k : walk.dense_seqlen_k;
        const bool after = p.shortest_first;  // the key blocks after this one come first
        const int first = after ? n0 / kBlockN + 1 : 0, end = after ? seqlen_k : n0;
        int before = 0;
        if constexpr (kBlockMap) {
          // Listed in key block nb's row: its kind there is not hidden.
          // (The writer runs on kProducerRegisters: one pointer and a
          // stride, no 64-bit index per block.)
          const int stride = p.block_map_row_stride - 1;
          const unsigned char *kinds =
              p.block_kinds + walk.map_row_index(batch, kv_head, 0) * stride + m_block;
          for (int nb = first + lane; nb * kBlockN < end; nb += 32)
            before += kinds[nb * stride] != 0;
        } else {
          for (int nb = first + lane; nb * kBlockN < end; nb += 32) {
            const QueryTiles seen = walk.query_tiles(seq, nb * kBlockN, batch, kv_head);
            before +=
                m_block >= seen.m_block_begin && m_block < seen.m_block_begin + seen.m_blocks;
          }
        }
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2)
          before += __shfl_xor_sync(0xffffffffu, before, offset);
        if (lane == 0) {
          while (load_acquire(p.dq_semaphore + accum_row(m0)) != before) nanosleep(32);
          fence_proxy_async_global();  // the acquire, before the TMA unit's adds below
        }
        __syncwarp();
      }
#pragma unroll
      for (int wg = 0; wg < 2; ++wg) {
        named_barrier_sync(full_id + wg, kDQBarrierThreads);
        if (lane == 0) {
          // Rows past seqlen_q reach the next head's (or sequence's) rows
          // of the accumulator; they add exact zeros there (P = 0 for
          // those queries, so dS and their dQ rows are 0), and TMA skips
          // rows past the tensor.
          const int row0 = static_cast<int>(accum_row(m0 + (kDQSplitRows ? wg * 64 : 0)));
          const int col0 = kDQSplitRows || kDQOwnKeys ? 0 : wg * kDQN;
          const u32 stage = smem + kOffsetDQ + wg * kDQStageBytes;
#pragma unroll
          for (int b = 0; b < kDQN / kDQBoxColumns; ++b)
            if (kHeadDim == kHeadDimQK || col0 + b * kDQBoxColumns < kHeadDimQK)
              tma_reduce_add_2d(&tma_dq_accum, stage + b * kDQBoxBytes,
                                col0 + b * kDQBoxColumns, row0);
          tma_commit_group();
          // Deterministic with each warpgroup over its own keys: both add
          // into the same box, so the first's adds are performed before
          // the second's go in (in flight together their order is free).
          if constexpr (kDeterministic && kDQOwnKeys)
            tma_wait_group<0>();
          else
            tma_wait_group_read<0>();
        }
        __syncwarp();
        named_barrier_arrive(free_id + wg, kDQBarrierThreads);
      }
      if constexpr (kDeterministic) {
        if (lane == 0) {
          // Both warpgroups' adds performed (not only read) before the
          // next key block is let in: one wait for both, after their
          // buffers went back (waiting for each before its buffer's
          // release held the consumers: d=256 causal 0.70x the default).
          tma_wait_group<0>();
          fence_proxy_async_global();  // the TMA unit's adds, before the release
          red_release_add(p.dq_semaphore + accum_row(m0), 1);
        }
        __syncwarp();
      }
    }
    if constexpr (kDQWriters == 2) at.add_tiles(iterations);  // whose turn a tile is
    if constexpr (!kResident) break;  // the one item: no loop left to compile
  }
  // The reductions are performed before the CTA's shared memory goes away.
  if (lane == 0) tma_wait_group<0>();
}

}  // namespace bwd_sm90
}  // namespace flashjit
