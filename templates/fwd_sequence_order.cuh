// The order in which the sm90 forward's persistent CTAs take a packed
// batch's sequences (FwdParams::sequence_order; common/fwd_scheduler.cuh):
// longest processing time first. One CTA, run before the forward on its
// stream each call (the lengths are device data the host never reads).
//
// Why: the persistent CTAs deal a packed batch's work tiles sequence by
// sequence, and a tile's cost is the key tiles it walks, which differ from
// sequence to sequence. In the batch's own order the last round may hold a
// long sequence's tiles while other SMs have nothing left: simulated on
// 16 documents of 176..3216 tokens (d = 256, 8 heads, 132 SMs) the busiest
// CTA ran 1.08x the average under the static rotation, 1.03x sorted; under
// a causal mask, tiles from the counter, 1.08x against 1.03x. On the H200
// (that batch, bf16, hidden 2048; seven interleaved rounds in one process)
// the order took the forward from 621 to 649 TFLOP/s at d = 256 (545 to
// 570 causal), d = 128 causal 532 to 544, d = 64 causal 406 to 418.
//
// The key of a sequence is the cost of its heaviest work tile (the key
// tiles its last query block sees: every tile of it without a mask, the
// most under a causal one), then its query blocks (more tiles first), then
// its index: a total order, so the ranks are a permutation whatever the
// lengths hold. Each of the kThreads threads ranks its sequences by
// counting the keys above theirs in shared memory (batch^2 / kThreads
// comparisons: about 1000 per thread at 1024 sequences). A batch of more
// sequences than kThreads keeps its own order (the host passes no order).
// The kernel also zeroes the tile counter (FwdParams::tile_counter) where
// the call takes tiles from one.
#pragma once

#include "fwd_sm90.cuh"

namespace flashjit {
namespace fwd_sequence_order {

using namespace cfg;
using fwd_sm90::kQRowsPerTile;
using Sequence = fwd_sm90::Sequence;

constexpr int kThreads = 1024;

// The sort key's two parts: the heaviest work tile's key tiles, the query
// blocks.
struct SequenceCost {
  int heaviest_tile, blocks;
};

template <class Params>
__device__ __forceinline__ SequenceCost sequence_cost(const Params &p, int b) {
  const Sequence seq(p, b);
  const int blocks = (seq.seqlen_q + kQRowsPerTile - 1) / kQRowsPerTile;
  if (blocks == 0) return {-1, 0};
  const TileSpan last = Score::key_tiles(p, seq.seqlen_k, (blocks - 1) * kQRowsPerTile,
                                                kQRowsPerTile, seq.offset, kBlockN);
  return {last.count, blocks};
}

// Whether sequence a goes before sequence b.
__device__ __forceinline__ bool goes_first(SequenceCost a, int ia, SequenceCost b, int ib) {
  if (a.heaviest_tile != b.heaviest_tile) return a.heaviest_tile > b.heaviest_tile;
  if (a.blocks != b.blocks) return a.blocks > b.blocks;
  return ia < ib;
}

}  // namespace fwd_sequence_order
}  // namespace flashjit

// One CTA of kThreads; p.batch <= kThreads (the host checks).
extern "C" __global__ void __launch_bounds__(flashjit::fwd_sequence_order::kThreads)
    flashjit_fwd_sequence_order(const flashjit::FwdParams p) {
  using namespace flashjit;
  using namespace flashjit::fwd_sequence_order;
  __shared__ SequenceCost costs[kThreads];
  // Launched as a programmatic dependent: the lengths may come from the
  // grid before; the forward after may start its prologue at once (it waits
  // for this grid's completion before it reads the order).
  grid_dependents_launch();
  grid_dependency_wait();
  const int b = threadIdx.x;
  const bool mine = b < p.batch;
  SequenceCost cost{-1, 0};
  if (mine) cost = sequence_cost(p, b);
  costs[b] = cost;
  if (b == 0 && p.tile_counter != nullptr) *p.tile_counter = 0;
  __syncthreads();
  if (!mine) return;
  int rank = 0;
  for (int other = 0; other < p.batch; ++other)
    rank += goes_first(costs[other], other, cost, b) ? 1 : 0;
  p.sequence_order[rank] = b;
}
