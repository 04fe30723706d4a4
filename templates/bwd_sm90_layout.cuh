// The sm90 backward's layout (bwd_sm90.cuh): the constants derived from the
// generator's prelude, flashjit::cfg (kHeadDimQK, kHeadDimV, kBlockM,
// kBlockN, kWarps, kStages, kSoftcap, kProducerRegisters,
// kConsumerRegisters, Element, Mask): tiles, shared memory, register
// budgets, named barriers, the mbarriers' places, and the order of a
// tile's products. The layout arithmetic is BwdSm90Layout
// (common/bwd_sm90_layout.cuh), which the host twin
// (generator/bwd_sm90_traits.cpp) compiles too.
#pragma once

#include "common/bwd_params.cuh"
#include "common/bwd_sm90_layout.cuh"
#include "common/fwd_sm90_layout.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

using namespace cfg;
using Ops = ElementOps<Element>;
// Each sequence's lengths and rows: dense, or a packed varlen batch.
using Sequence = SequenceInfo<kVarlen, kSeqUsedK, 0, kBlockN>;
// A caller's mask_mod walks the query tiles its block map lists
// (bwd_block_map.cuh), hidden ones never loaded, and calls mask_mod only on
// the ones it does not show whole.
constexpr bool kBlockMap = Modifiers::kMask;
// Resident CTAs over work items, or one CTA per item (the same loop, which
// then runs once: its position is a constant the compiler folds).
constexpr bool kResident = sm90_backward_resident(Modifiers::kScore, Modifiers::kMask);

// The layout arithmetic the host twin (generator/bwd_sm90_traits.cpp) uses too.
constexpr BwdSm90Layout kLayout{kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kStages};
// The tiled head dims (32, 64, 96, 128, 192 or 256) of Q and K, and of V
// and dO (they may differ, e.g. 192/128): a problem's between has zero
// columns past its own (TMA fills them), so S^T, dP^T and the products keep
// them zero; dK, dV and dQ store and reduce only the problem's columns.
constexpr int kHeadDim = kLayout.tile_head_dim();
constexpr int kHeadDimVTile = kLayout.tile_head_dim_v();
constexpr int kThreads = kWarps * 32;
constexpr int kConsumerWarps = 8;
// The head-dim split wherever either tile is 192 or 256 wide, but 192/128
// with 128 keys a CTA.
constexpr bool kSplitHeadDim = kLayout.splits_head_dim();
// Q, K, V and dO as swizzle rows of kAtomCols columns (64: 128 bytes; 32,
// where a tile is 32, 96 or 192 wide: 64 bytes, so that a 192's halves of
// 96 columns start on a row) in 8-row atoms of kAtomBytes.
constexpr int kAtomCols = kLayout.atom_columns();
constexpr int kColBlocks = kLayout.col_blocks();     // swizzle columns of Q, K
constexpr int kVColBlocks = kLayout.v_col_blocks();  // and of V, dO
constexpr int kRowBytes = kLayout.row_bytes();
constexpr int kAtomBytes = kLayout.atom_bytes();
constexpr int kKStepsPerRow = kAtomCols / 16;  // k16 steps in one swizzle row
// dS^T (and P^T) keep 64 queries (128 bytes) per swizzle row.
constexpr int kDsRowBytes = BwdSm90Layout::kDsRowBytes;

constexpr int kSN = kLayout.s_columns();   // query columns of a warpgroup's S^T
constexpr int kKN = kLayout.dk_columns();  // its columns of dK
constexpr int kVN = kLayout.dv_columns();  // and of dV
// Loops over both head dims' column blocks or n8 tiles at once, each side
// guarded, so that equal head dims interleave K with V (Q with dO, dK with
// dV) as one loop.
constexpr int kMaxColBlocks = kColBlocks > kVColBlocks ? kColBlocks : kVColBlocks;
constexpr int kMaxKVN = kKN > kVN ? kKN : kVN;

// Tiles as swizzled column blocks ([col block][row][kRowBytes]).
constexpr int kKVColBlockBytes = kLayout.kv_col_block_bytes();
constexpr int kKTileBytes = kLayout.k_tile_bytes();
constexpr int kVTileBytes = kLayout.v_tile_bytes();
constexpr int kQColBlockBytes = kLayout.q_col_block_bytes();
constexpr int kQTileBytes = kLayout.q_tile_bytes();    // one Q tile
constexpr int kDOTileBytes = kLayout.do_tile_bytes();  // one dO tile
// dS^T: keys as rows, queries as columns.
constexpr int kDsColBlockBytes = kLayout.ds_col_block_bytes();
constexpr int kDsBytes = kLayout.ds_bytes();
// Under the head-dim split, P^T follows dS^T in each buffer.
constexpr int kDsBufferBytes = kLayout.ds_buffer_bytes();

// Bytes, relative to the 1024-byte aligned base of dynamic shared memory.
constexpr int kOffsetK = kLayout.offset_k();
constexpr int kOffsetV = kLayout.offset_v();
constexpr int kOffsetQ = kLayout.offset_q();
constexpr int kOffsetDO = kLayout.offset_do();
constexpr int kOffsetDS = kLayout.offset_ds();  // 2 buffers
// Per consumer warpgroup, two buffers of [LSE | D][kSN] fp32: the
// statistics of its S^T columns.
constexpr int kStatsBytes = kLayout.stats_bytes();
constexpr int kOffsetStats = kLayout.offset_stats();
constexpr int kOffsetDQ = kLayout.offset_dq();  // 1024-byte aligned
constexpr int kSmemAlign = BwdSm90Layout::kSmemAlign;
constexpr int kSmemLimit = BwdSm90Layout::kSmemLimit;

// Register budgets after setmaxnreg. The CTA's pool is what the launch
// allocated, 168 per thread (65536 / 384, rounded down to a multiple of 8):
// the consumers' increase must be covered by what the producer gives back,
// or setmaxnreg.inc waits forever (seen: 240/32 hung every launch).
// kProducerRegisters and kConsumerRegisters come from the prelude
// (generator/warp_roles.cpp).
constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;

constexpr int kSSteps = kSN / 16;     // S^T's columns as k16 steps of dV and dK
// Where a warpgroup's own keys take dK and dV so wide that S^T and dP^T
// over the whole query tile would not fit beside them (192/128: 96 + 64
// registers), S^T and dP^T go in two passes over half the tile's queries
// each, P^T and dS^T packed to 16 bits between them. (In one pass ptxas
// spilled 760 bytes there and serialised every wgmma; in two, with the
// producer on 24 registers, it spills 84-212 bytes of scalars and
// serialises none: warp_roles.cpp.)
constexpr int kSParts = !kSplitHeadDim && kKN / 2 + kVN / 2 + kSN > 200 ? 2 : 1;
constexpr int kSPartN = kSN / kSParts;          // query columns of one pass
constexpr int kSPartRegisters = kSPartN / 2;    // its S^T (and dP^T) accumulators
constexpr int kSPartTiles = kSPartN / 8;
constexpr int kSPartSteps = kSPartN / 16;
// In two passes (one Q/dO stage, dQ after dV and dK) the first pass's dV
// and dK products are issued with the second's S^T and dP^T and run under
// its element-wise work; the tensor cores otherwise idle there, the
// other warpgroup being at the same place (dS^T's barrier each tile).
// ncu had this tiling latency-bound (issue slots 17%); with the products
// moved, 192/128 8k causal 346.8 -> 422.1 TFLOP/s, full 409.8 -> 472.6
// (H100, docs/PERF.md, 2026-12-05).
constexpr bool kEarlyPartProducts = kSParts == 2 && kStages == 1;
static_assert(kSParts <= 2, "the early part products take the pass before as k-steps 0.."
                            "kSPartSteps: two passes at most");
constexpr int kKRegisters = kKN / 2;  // dK accumulators per thread
constexpr int kVRegisters = kVN / 2;  // dV accumulators per thread
// k16 steps of S^T and of dP^T: over the problem's columns only (the
// tile's past them are zeros, which add nothing).
constexpr int kQKSteps = (kHeadDimQK + 15) / 16;
constexpr int kVSteps = (kHeadDimV + 15) / 16;
// K's and V's rows (the A operands of S^T and dP^T) as wgmma A fragments
// in registers, loaded from shared memory once an item, for the first
// kKFragmentSteps and kVFragmentSteps k16 steps. Under the head-dim split
// each warpgroup's S^T and dP^T are 64 keys x 32 queries: from shared
// memory a k16 step reads 2 KB of K (or V) and 1 KB of Q^T (dO^T) for 16
// cycles of the SM's tensor cores, 192 bytes a cycle against shared
// memory's 128, so those products ran at about two thirds of the tensor
// cores' rate (192/128 causal 8k, 0.84x cuDNN, docs/PERF.md); from
// registers a step reads 1 KB. A step's fragment is 4 registers a thread,
// held across the item beside dK's and dV's halves: as many as fit without
// spilling, or ptxas reloads them into registers that in-flight wgmmas
// still read and serialises every wgmma of the kernel (192/128 with all
// 8 of V's steps: 20 bytes spilled, serialised). Offline (ptxas, SASS):
// K's steps up to 192 columns beside V tiled at most 192 wide (beside a
// 256, dV's 64 registers: 192/256 and 192/224 serialised), and V's first 6
// where V is tiled at most 128 wide (192/128: spills 4 bytes as without
// them; 192 with 2 of V's spilled 28-128). Only under the split, whose
// warpgroups both take the CTA's 64 keys (the fragments are its rows 0..).
constexpr int kKFragmentSteps =
    kSplitHeadDim && kQKSteps <= 12 && kHeadDimVTile <= 192 ? kQKSteps : 0;
constexpr int kVFragmentSteps =
    kSplitHeadDim && kHeadDimVTile <= 128 ? (kVSteps < 6 ? kVSteps : 6) : 0;
constexpr int kPSteps = kBlockM / 16;  // k16 steps of dV and dK
// dQ's tile (kBlockM x head dim) over the two warpgroups, three ways:
//   rows      (kBlockM = 128): each warpgroup 64 query rows, over all keys;
//   columns   (kBlockM = 64, head dim 128 to 256): each half the head
//             dim, over all keys;
//   own keys  (kBlockM = 64, head dim 32, 64 or 96): each the whole tile over its own
//             64 keys, both adding to the accumulator (twice the reductions,
//             but no dS^T exchange: the warpgroups never wait for each other).
// Each warpgroup's product is 64 x kDQN, whole swizzle columns of K.
constexpr bool kDQSplitRows = kLayout.dq_split_rows();
constexpr bool kDQOwnKeys = kLayout.dq_own_keys();
constexpr int kDQN = kLayout.dq_columns();
constexpr int kDQSteps = (kDQOwnKeys ? 64 : kBlockN) / 16;  // k16 steps (keys) of dQ
constexpr int kDQRegisters = kDQN / 2;
constexpr int kDQTiles = kDQN / 8;
// How dQ's part reaches the accumulator. Staged (where shared memory has
// room): the warpgroup writes it to a buffer of its own (fp32, boxes of 32
// columns x 64 rows, 128-byte swizzled: conflict-free 8-byte stores) and
// arrives on a barrier; the dQ writer warp hands it to the TMA unit as a
// reduce-add into the accumulator's tensor map. Else each thread adds its
// fragments with vectorised reductions: 16 `red.global.add.v2.f32` per
// thread per tile at d=128, whose source registers stay locked until the L1
// has sent them, and the next tile's S^T and dP^T land in those same
// registers: ncu, d=128 8k causal, 34% of the warps' cycles stalled on that
// scoreboard, and the kernel without the reductions ran 23% faster. H200,
// forward + backward d=128 4 x 8192 causal: 8.8 ms with atomics, 8.5 staged
// with a consumer thread issuing the reduce (after a barrier over its
// warpgroup), 7.8 with the writer warp. `flashjit run --pass bwd` 8k,
// TFLOP/s, consumer-issued -> writer warp: d=128 full 456.9 -> 472.9,
// causal 411.3 -> 451.2; d=256 full 357.3 -> 394.6, causal 339.9 -> 394.5.
constexpr int kDQBoxColumns = BwdSm90Layout::kDQBoxColumns;  // 128 bytes of fp32
constexpr int kDQBoxBytes = kLayout.dq_box_bytes();
constexpr int kDQStageBytes = kLayout.dq_stage_bytes();  // one warpgroup's part
// kv_full, kv_empty, item_full[2], item_empty[2], full[kStages],
// empty[kStages], then the two work item slots.
constexpr int kBarrierCount = kLayout.barrier_count();
constexpr int kBarrierBytes = kLayout.barrier_bytes();
constexpr bool kDQStaged = kLayout.dq_staged();
constexpr int kOffsetBarriers = kLayout.offset_barriers();
constexpr int kSmemUsed = kLayout.smem_used();

// Named barrier ids: 0 is __syncthreads; 1 the consumers' dS^T exchange.
constexpr int kBarrierDs = 1;
// 2, 3: one per consumer warpgroup, its own copy of the tile's LSE and D.
constexpr int kBarrierStats = 2;
// Staged dQ, one pair per consumer warpgroup, each over its 128 threads and
// a dQ writer's warp: 4, 5 its part written (consumers arrive, the writer
// waits); 6, 7 its buffer free again (the other way round). The
// deterministic mode has two writers, the producer warpgroup's second and
// third warps, taking the tiles in turn (even, odd): its writer waits for
// a tile's adds to be performed before it lets the next key block in,
// which at d=256 (64 KB of adds a tile) took about as long as the tile, so
// that one writer set the pace (0.81x the default mode). The odd tiles'
// pairs are 8, 9 and 10, 11; a tile's "free" comes from the writer of the
// tile before, which read the buffer last. At every head dim since the
// default mode's tiles got faster (H200, d=128 8k causal 436.5 -> 468.4
// TFLOP/s = 0.94x the default mode, GQA 32/8 3000 365.8 -> 415.2, d=96 2k
// causal 252.9 -> 285.2, d=64 2k causal within 1%; the producer warpgroup
// then spills up to the tuner's 64 bytes of local memory); not under a
// caller's mask_mod or score_mod (kResident false: it spilled the block
// map's count of earlier key blocks, d=128, 0 -> 116 bytes).
constexpr int kDQWriters = kDQStaged && kDeterministic && kResident ? 2 : 1;
constexpr int kBarrierDQFull = 4;
constexpr int kBarrierDQFree = 6;
constexpr int kDQBarrierThreads = 128 + 32;
// The order of a tile's last products. With one Q/dO stage the stage goes
// back as soon as dV and dK have read it, and dQ's product and store run
// under the producer's next load. With two the next tile's Q and dO are
// loading already, so dQ's product goes second and its store runs under the
// last product instead (FlashAttention-3's order). H200, d=128 two stages,
// 8k 476 -> 480 TFLOP/s, 512 274 -> 278; with one stage that order exposed
// the load (470 -> 380). Not with dQ's atomics: their source registers
// stay locked until the L1 has sent them (see kDQStaged).
constexpr bool kDQUnderLastMma = kStages >= 2 && kDQStaged;
// With 128-query tiles (head dims up to 64) the tile's last product, dK, is
// left running into the next tile: the next S^T and dP^T queue behind it on
// the tensor cores instead of waiting for it to drain, and the stage goes
// back after the next tile's first wait (which covers dK); dS^T's A
// fragments stay live until then. H200, bf16, 16k tokens, TFLOP/s, two
// runs each: d=64 causal 1k 236.6 -> 245.6, 8k 380.4 -> 388.9, full 8k
// 401.0 -> 403.4. Not with 64-query tiles: d=128 within 1% (8k full 507.6
// -> 502.7, causal 534.9 -> 531.3), d=96 causal 2k 345.5 -> 334.9, d=80
// causal 3000 332.8 -> 318.2 (docs/PERF.md, 2026-12-04).
constexpr bool kDKIntoNextTile = kDQUnderLastMma && kDQSplitRows;
// The writer (0 or 1) of the CTA's `tile`-th tile.
__device__ __forceinline__ int dq_writer_of(u32 tile) {
  return kDQWriters == 2 ? static_cast<int>(tile % 2) : 0;
}

static_assert(sm90_head_dim_served(kHeadDimQK) && sm90_head_dim_served(kHeadDimV),
              "sm90 backward: head dims that are multiples of 8 from 32 to 256");
static_assert(kKN % kAtomCols == 0 && kVN % kAtomCols == 0,
              "a warpgroup's dK and dV columns are whole swizzle columns of Q and dO");
static_assert(kBlockN == (kSplitHeadDim ? 64 : 128),
              "64 keys per consumer warpgroup, 2 of them; 64 shared under the head-dim split");
static_assert(kBlockM == 64 || (kBlockM == 128 && !kSplitHeadDim), "query tiles of 64 or 128 rows");
static_assert(kWarps == BwdSm90Layout::kWarps, "one producer warpgroup + two consumers");
static_assert(kStages >= 1 && kStages <= 3, "1 to 3 Q/dO buffers");
static_assert(!kDeterministic || kDQStaged,
              "the deterministic sm90 backward orders dQ's TMA reduce-adds: dQ staged");
static_assert(kDQN % kAtomCols == 0, "dQ parts are whole swizzle columns of K");
static_assert(kKRegisters + kVRegisters + 2 * kSPartRegisters <= 200,
              "dK, dV, S^T and dP^T must fit the consumers' registers");
static_assert(2 * kConsumerRegisters + kProducerRegisters <= 3 * kLaunchRegisters,
              "the consumers' setmaxnreg.inc would wait for registers nobody frees");
static_assert(kSmemUsed + kSmemAlign <= kSmemLimit, "shared memory exceeds sm_90's 227 KB");

// The mbarriers, after dQ's staging buffers: kv_full, kv_empty, item_full[2],
// item_empty[2], full[kStages], empty[kStages], then the two work item slots
// (see the pipeline in bwd_sm90.cuh).
struct Barriers {
  u32 base;  // shared address of kv_full
  __device__ __forceinline__ u32 kv_full() const { return base; }
  __device__ __forceinline__ u32 kv_empty() const { return base + 8; }
  __device__ __forceinline__ u32 full(int s) const { return base + 8 * (6 + s); }
  __device__ __forceinline__ u32 empty(int s) const { return base + 8 * (6 + kStages + s); }
  // Work item n's slot (n % 2): written, and taken by every reading warp.
  __device__ __forceinline__ u32 item_full(u32 n) const { return base + 8 * (2 + n % 2); }
  __device__ __forceinline__ u32 item_empty(u32 n) const { return base + 8 * (4 + n % 2); }
  __device__ __forceinline__ u32 item_slot(u32 n) const {
    return base + 8 * kBarrierCount + 4 * (n % 2);
  }
};
// The warps that take each work item: every consumer warp and the dQ writers.
constexpr int kItemReaders = kConsumerWarps + (kDQStaged ? kDQWriters : 0);

// A consumer thread's place: its warpgroup (cwg, 0 or 1) and, in the wgmma
// fragments, rows 16 warp + group (and + 8) and column pair quad_lane of
// the warpgroup's 64 rows. (An aggregate of the consumer's own values: a
// constructor from the thread index recomputed them, and the consumers'
// register allocation changed.)
struct ConsumerThread {
  int cwg, warp, group, quad_lane;
};

}  // namespace bwd_sm90
}  // namespace flashjit
