// The sm90 forward's configuration (fwd_sm90.cuh): the constants derived
// from the generator's prelude, flashjit::cfg (kHeadDimQK, kHeadDimV,
// kBlockM, kBlockN, kWarps, kStages, kSoftcap, kProducerRegisters,
// kConsumerRegisters, Element, OutElement, Mask), the parts they choose (scheduler,
// sequence, epilogue), the mbarriers' places and the pipeline's positions.
// The layout arithmetic is FwdSm90Layout (common/fwd_sm90_layout.cuh, which
// the host twin compiles too); the host twin of every derived constant is
// generator/fwd_sm90_traits.cpp.
#pragma once

#include "common/block_map.cuh"
#include "common/fwd_params.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/fwd_sm90_layout.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/sm90_epilogue.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm90 {

using namespace cfg;
using Modifiers = cfg::Modifiers;

// e4m3 Q, K and V (FlashAttention-3's fp8 forward): k32 wgmma on both
// GEMMs, V transposed in shared memory (fwd_sm90_v_transpose.cuh), P
// quantized to e4m3 times 2^kPExponent (so that the small probabilities
// beside a large one, an attention sink's, stay above e4m3's smallest
// subnormal, 2^-9), the descales folded into the softmax's scale and O's
// finish; O in OutElement.
constexpr bool kFp8 = IsFp8<Element>::value;
constexpr int kElementBytes = kFp8 ? 1 : 2;
// The caller's Q: Element, or 16-bit under an e4m3 KV cache, quantized per
// row into e4m3 in the kernel (fwd_sm90_q_quantize.cuh).
constexpr int kQElementBytes = static_cast<int>(sizeof(QElement));
constexpr int kPExponent = kFp8 ? 8 : 0;

// The tiled head dim (64, 128, 192 or 256, past 256 whole 64 columns up to
// 576; e4m3 128 or 256): a problem's between has zero columns past its own
// (TMA fills them), which the epilogue never stores.
constexpr int kHeadDim = sm90_forward_tile_head_dim(kHeadDimQK, kElementBytes);
// V's and O's (kHeadDimV may differ from kHeadDimQK, e.g. 192/128 or MLA's
// 576/512).
constexpr int kHeadDimVTile = sm90_forward_tile_head_dim_v(kHeadDimQK, kHeadDimV, kElementBytes);
// The layout arithmetic the host twin (generator/fwd_sm90_traits.cpp) uses too.
constexpr FwdSm90Layout kLayout{kHeadDim,  kBlockM,   kBlockN,       kStages,       kPackGqa,
                                 kPageSize, kHeadDimVTile, kElementBytes, kQElementBytes,
                                 kVInK};
constexpr bool kQuantizeQ = kLayout.quantizes_q();
// Past 256 columns (kColumnSplit 2) the two consumer warpgroups of a row
// group hold the same 64 rows: warpgroup h computes S over the h-th half of
// Q's and K's columns, adds its partner's half through shared memory (both
// then hold the same S, and run the same softmax), and owns the h-th half
// of O's columns (kOColumns), which it multiplies with the same half of V.
constexpr int kColumnSplit = kLayout.column_split();
constexpr int kRowGroups = kLayout.row_groups();
constexpr int kConsumerWarpgroups = kLayout.consumer_warpgroups();
constexpr int kConsumerWarps = 4 * kConsumerWarpgroups;
constexpr int kThreads = kWarps * 32;
constexpr int kColBlocks = kLayout.col_blocks();  // 128-byte swizzle columns of Q, K
constexpr int kVColBlocks = kLayout.v_col_blocks();  // and of V
constexpr int kRowBytes = FwdSm90Layout::kRowBytes;
constexpr int kColElems = kRowBytes / kElementBytes;  // elements of a 128-byte column block
constexpr int kQColElems = kRowBytes / kQElementBytes;  // of TMA's Q
constexpr int kQLoadedColBlocks = kLayout.q_loaded_col_blocks();
// Packed GQA (kPackGqa > 1): a warpgroup's rows are kQRowsPerWg positions
// times the kPackGqa query heads of one KV head, head fastest.
constexpr int kPack = kPackGqa;
constexpr int kQRowsPerWg = kLayout.q_rows_per_warpgroup();
constexpr int kLoadedRowsPerWg = kLayout.loaded_rows_per_warpgroup();
constexpr int kQRowsPerTile = kLayout.q_rows_per_tile();

// Bytes, relative to the 1024-byte aligned base of dynamic shared memory.
constexpr int kQColBlockBytes = kLayout.q_col_block_bytes();  // one warpgroup's rows
constexpr int kQWarpgroupBytes = kLayout.q_warpgroup_bytes();
constexpr int kQBytes = kLayout.q_bytes();
constexpr int kQLoadedBytes = kLayout.q_loaded_bytes();  // what TMA writes per Q buffer
constexpr int kKVColBlockBytes = kLayout.kv_col_block_bytes();
constexpr int kKTileBytes = kLayout.k_tile_bytes();  // one K tile
constexpr int kVTileBytes = kLayout.v_tile_bytes();  // one V tile
// The host allocates the used bytes + kSmemAlign: the base is rounded up to
// the 1024 bytes at which the 128-byte swizzle pattern repeats (TMA and
// wgmma both apply it to absolute shared addresses). Two Q buffers where
// they fit: the next work tile's Q loads while this one's is still in use
// (until its last S), so the next work tile's first S need not wait for it.
constexpr int kSmemAlign = FwdSm90Layout::kSmemAlign;
constexpr int kQStages = kLayout.q_stages();
constexpr int kOffsetK = kLayout.offset_k();
// V read from K's tiles (kVInK: MLA's one latent cache for both): no V
// loads; P V reads the K stage's first column blocks, and the consumers
// release the stage after P V (k_empty), not after S.
constexpr bool kVFromK = kVInK;
constexpr int kOffsetV = kLayout.offset_v();  // e4m3: the staging ring
constexpr int kOffsetVt = kLayout.offset_vt();  // e4m3: V^T's ring
// A Q buffer as TMA lands it, and a warpgroup's share (16-bit where Q is
// quantized in place; kQBytes and kQWarpgroupBytes otherwise).
constexpr int kQBufferBytes = kLayout.q_buffer_bytes();
constexpr int kQBufferWarpgroupBytes = kLayout.q_buffer_warpgroup_bytes();
constexpr int kOffsetQScales = kLayout.offset_q_scales();  // a quantized Q's rows' scales
constexpr int kOffsetBarriers = kLayout.offset_barriers();
constexpr int kOffsetTileSlots = kLayout.offset_tile_slots();
static_assert(kLayout.smem_bytes() <= FwdSm90Layout::kSmemBudget,
              "shared memory exceeds sm_90's 227 KB");

using Scheduler = FwdTileScheduler<kQRowsPerTile, kPack, kSplitKv, kVarlen>;
// A caller's mask_mod: the work tiles walk the key tiles its block map lists
// (common/block_map.cuh), hidden ones never loaded.
constexpr bool kBlockMap = Modifiers::kMask;
// Its partial tiles masked from row runs where the pre-pass found them
// (kBlockMapRuns, fwd_block_map.cuh): one run per query row, which a packed
// tile's heads share only when mask_mod reads no head. Not with three
// consumer warpgroups (d = 64, 192-row tiles): the bounds' registers spilled
// 112 bytes (ALiBi plus documents, window and softcap).
constexpr bool kRowRuns =
    kBlockMap && kConsumerWarpgroups < 3 && (kPack == 1 || Modifiers::kMaskQkOnly);
// A thread's two rows' runs (FwdParams::block_runs words) for one key tile.
struct RowRuns {
  unsigned row[2];
};
using Sequence = SequenceInfo<kVarlen, kSeqUsedK, kPageSize, kBlockN>;
// Paged K/V: the whole first producer warp runs the producer loop, its lanes
// reading a tile's page indices at once; lane 0 issues the loads.
constexpr bool kWarpProducer = Sequence::kPaged;
static_assert(!Sequence::kGathered && Sequence::kBoxesPerTile <= 32,
              "TMA pages of whole 16-row boxes, one producer lane each");
static_assert(Sequence::kBoxRows == kLayout.kv_box_rows(),
              "the host encodes the K/V tensor maps' boxes with these rows");
// O's columns a consumer warpgroup holds.
constexpr int kOColumns = kHeadDimVTile / kColumnSplit;
using Epilogue = Sm90Epilogue<OutElement, kOColumns, kHeadDimV, kPack, kLoadedRowsPerWg, kSplitKv,
                              Modifiers::kSinks, kColumnSplit>;

// Register budgets after setmaxnreg, kProducerRegisters and
// kConsumerRegisters, come from the prelude (generator/warp_roles.cpp says
// why they are what they are).

constexpr int kSRegisters = kBlockN / 2;    // S accumulators per thread
constexpr int kORegisters = kOColumns / 2;  // O accumulators per thread
constexpr int kSTiles = kBlockN / 8;        // n8 column tiles of S
constexpr int kOTiles = kOColumns / 8;  // n8 column tiles of O
// k-steps of O += P V: 16 keys (k16), or 32 with e4m3 (k32); each is 32
// bytes of a K-major row.
constexpr int kPVSteps = kBlockN / (kFp8 ? 32 : 16);
// k-steps of S = Q K^T, 32 bytes of a row each: over the problem's columns
// only (the tile's past them are zeros, which add nothing to S).
constexpr int kQKSteps = (kHeadDimQK * kElementBytes + 31) / 32;
// A warpgroup's k-steps of S: all, or with split columns the first or
// second half (rounded up: the tile's columns past the problem's are zeros).
constexpr int kQKStepsPerWarpgroup = (kQKSteps + kColumnSplit - 1) / kColumnSplit;
// V's column blocks of a warpgroup's half of O.
constexpr int kVColBlocksPerWarpgroup = kVColBlocks / kColumnSplit;
// The partial S exchange's buffers (one or two, kLayout.s_exchange_buffers).
constexpr int kOffsetSExchange = kLayout.offset_s_exchange();
constexpr int kSExchangeBuffers = kLayout.s_exchange_buffers();

// Turns between row groups (the two warpgroups of a split row group work in
// step, meeting at each S exchange).
constexpr bool kPingPong = kRowGroups >= 2;
// The serving call's work tiles (a packed batch over a KV cache) often leave
// whole consumer warpgroups without a query (a decode step's one query in a
// 128-row tile): those issue no GEMM (idle_walk). H200, 48 decode steps plus
// 4 prefill chunks: the call 5% faster at pages 16 and 64, its prefill part
// alone 0.5-1.6% slower. Only there: in every packed batch's kernel the
// branch cost 2-9% of the forward at d = 64 and 128 (training batches'
// sequences leave few warpgroups idle), and the dense kernels stay as they
// were. Two consumer warpgroups only: with three (160 registers each) the
// second loop spilled 108 bytes (d = 64, 192 x 112 tiles, page 256).
constexpr bool kSkipIdleWarpgroups = kVarlen && (kSeqUsedK || kPageSize > 0) &&
                                     kConsumerWarpgroups == 2 && kColumnSplit == 1 && !kVFromK;
// Intra-warpgroup overlap keeps S(t+1), P(t) and O live at once. With V's
// head dim tiled as 256 (O alone is 128 registers) that fits 232 registers
// (ptxas -v: every mask, softcap, sinks, decode, split, paged variant),
// except beside a caller's score_mod or mask_mod (ALiBi with documents: 24
// bytes spilled) or the idle-warpgroup walk (varlen with a counted cache:
// 208 bytes): those run S, softmax, P V in sequence.
// e4m3 at 256 (O 128, S 64 and P 16 registers at its 128-key tiles) spilled
// 144 bytes and serialised the wgmmas in 224 registers with the overlap.
constexpr bool kIntraOverlap =
    kOColumns < 256 ||
    !(kFp8 || Modifiers::kScore || Modifiers::kMask || kSkipIdleWarpgroups);
// Named barrier ids: 0 is __syncthreads; 1.. the turns, one per consumer
// warpgroup; with split columns, 1.. each row group's S exchange.
constexpr int kBarrierPingPong = 1;
constexpr int kBarrierSExchange = 1;

static_assert(sm90_forward_head_dim_served(kHeadDimQK) && sm90_forward_head_dim_served(kHeadDimV),
              "sm90 path: head dims that are multiples of 8 from 32 to 576");
static_assert(kColumnSplit == 1 || (!kFp8 && kRowGroups == 1),
              "split columns: 16-bit, one row group of 64 rows");
static_assert(kVColBlocks % kColumnSplit == 0, "split columns: whole V blocks per warpgroup");
static_assert(kOColumns <= 256, "wgmma N: at most 256 columns of O per warpgroup");
static_assert(!kVFromK || (!kFp8 && kHeadDimV <= kHeadDimQK && kVColBlocks <= kColBlocks),
              "V from K's tiles: 16-bit, V's columns within K's");
static_assert(kBlockM == 64 || kBlockM == 128 || kBlockM == 192,
              "64 rows per row group, 1 to 3 of them");
static_assert(kPack >= 1 && kPack <= 64, "packed GQA: 1 to 64 query heads per tile row group");
static_assert(kWarps == 4 * (kConsumerWarpgroups + 1), "one producer warpgroup + consumers");
static_assert(kBlockN % 16 == 0 && kBlockN >= 16 && kBlockN <= 256,
              "block_n: multiple of 16 (P V k-steps) up to 256 (wgmma N, TMA box)");
static_assert(kStages >= 2, "at least double buffering");
static_assert(!kFp8 || kBlockN == 128, "e4m3: V^T's rows are one 128-byte block of keys");
// The CTA's register pool is what the launch allocated (65536 / kThreads per
// thread, rounded down to a multiple of 8): the consumers' setmaxnreg.inc
// must be covered by what the producer gives back, or it waits forever.
static_assert(kConsumerWarpgroups * kConsumerRegisters + kProducerRegisters <=
                  (1 + kConsumerWarpgroups) * (65536 / kThreads / 8 * 8),
              "the consumers' setmaxnreg.inc would wait for registers nobody frees");

// The mbarriers: q_full[kQStages], q_empty[kQStages], then the K/V ring's
// k_full, v_full, k_empty and v_empty[kStages] from kv_base, and with e4m3
// V^T's vt_full and vt_empty[kStages] (v_full then says the staging tile
// landed, v_empty that the transposing warps have read it). (Two bases, as
// values: the K/V ring's addresses folded into offsets from `base` changed
// the consumers' register allocation, d=128 0 -> 24 bytes spilled.)
struct Barriers {
  u32 base, kv_base;
  __device__ __forceinline__ explicit Barriers(u32 bar_base)
      : base(bar_base), kv_base(bar_base + 8 * 2 * kQStages) {}
  __device__ __forceinline__ u32 q_full(int b) const { return base + 8 * b; }
  __device__ __forceinline__ u32 q_empty(int b) const { return base + 8 * (kQStages + b); }
  __device__ __forceinline__ u32 k_full(int s) const { return kv_base + 8 * s; }
  __device__ __forceinline__ u32 v_full(int s) const { return kv_base + 8 * (kStages + s); }
  __device__ __forceinline__ u32 k_empty(int s) const { return kv_base + 8 * (2 * kStages + s); }
  __device__ __forceinline__ u32 v_empty(int s) const { return kv_base + 8 * (3 * kStages + s); }
  __device__ __forceinline__ u32 vt_full(int s) const { return kv_base + 8 * (4 * kStages + s); }
  __device__ __forceinline__ u32 vt_empty(int s) const { return kv_base + 8 * (5 * kStages + s); }
  // A quantized Q's e4m3 buffer b written (the quantizing warps' arrivals).
  __device__ __forceinline__ u32 qc_full(int b) const {
    return kv_base + 8 * (kLayout.kv_barriers() + b);
  }
  // What the consumers wait for before P V, and release after it: V, V^T,
  // or K's stage (kVFromK).
  __device__ __forceinline__ u32 pv_full(int s) const {
    return kFp8 ? vt_full(s) : kVFromK ? k_full(s) : v_full(s);
  }
  __device__ __forceinline__ u32 pv_empty(int s) const {
    return kFp8 ? vt_empty(s) : kVFromK ? k_empty(s) : v_empty(s);
  }
};

// The K/V ring's stage and phase of K/V tile `it` (counted over all work
// tiles), and the Q buffer and phase of work tile j (counted per CTA), for
// the producer and the consumers alike; work tile j's slot (the tile taken,
// when the producer takes them) next to its Q buffer's barriers.
__device__ __forceinline__ int stage_of(int it) { return it % kStages; }
__device__ __forceinline__ u32 parity_of(int it) { return static_cast<u32>(it / kStages) & 1; }
__device__ __forceinline__ int q_buffer_of(int j) { return j % kQStages; }
__device__ __forceinline__ u32 q_parity_of(int j) { return static_cast<u32>(j / kQStages) & 1; }
__device__ __forceinline__ u32 tile_slot(u32 smem, int j) {
  return smem + kOffsetTileSlots + 8 * q_buffer_of(j);
}

}  // namespace fwd_sm90
}  // namespace flashjit
