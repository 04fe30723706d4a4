// FlashAttention-3 style backward for sm_90a (TMA + wgmma + warp specialisation).
//
// Three kernels, run in order on one stream: flashjit_bwd_preprocess and
// flashjit_bwd_convert_dq (bwd_rowwise.cuh, shared with the sm80 family) and
// flashjit_bwd_sm90 below, which computes dK, dV and adds dQ's
// contributions to the fp32 accumulator.
//
// Tiling. One work item per (kBlockN keys, KV head, batch), in sections of
// (KV head, batch) pairs with the first (under a mask the heaviest) key
// blocks first (cta_keys, BwdSm90Traits::dispatch_section). Where kResident,
// a CTA per SM takes items until they run out, in the order the hardware
// would dispatch CTAs (the producer fetches the next from a counter and
// passes it to the other roles through two shared slots), so that one
// item's epilogue and last dQ adds overlap the next one's K, V, Q and dO
// loads (H200, bf16, 16k tokens: +2.6-4.3% at 512 tokens, +1-3% at 1-2k,
// within 1% from 4k); else (a caller's score_mod or mask_mod) a CTA per
// item. K and V rows stay in shared memory and dK and dV accumulate in
// registers across every query head of the KV head's group (GQA sums there)
// and every query tile of kBlockM rows that can see these keys (causal and
// window bounds skip the rest). The two consumer warpgroups share the work
// one of two ways:
//   own keys (tiled head dims 32 to 128, kBlockN = 128): each owns 64 of the
//     keys, their S^T and dP^T over the whole query tile and their dK and
//     dV over the whole head dim;
//   split head dim (tiled 192 or 256, kBlockN = 64): both take the same 64
//     keys; each computes S^T and dP^T for half the tile's queries, writes
//     P^T and dS^T to shared memory, and accumulates dK and dV for half the
//     head dim (64 + 64 registers at 256, where whole rows would take 256)
//     with both operands from shared memory (FlashAttention-3's d=256
//     split). At 192 the halves are 96 columns, so Q, K, V and dO are laid
//     out in 64-byte swizzle rows of 32 columns (kAtomCols) for each half to
//     start on one.
// Per query tile, per consumer warpgroup, all on wgmma (own keys):
//   S^T  = K_wg Q^T, dP^T = V_wg dO^T    SS, both operands K-major;
//   P^T  = exp2(S^T * scale_log2 - LSE[query] log2 e), dS^T = P^T (dP^T - D)
//          in registers (times 1 - tanh^2 under softcap; a caller's
//          score_mod and mask_mod recomputed per element, dS^T times
//          score_mod_grad; common/modifiers.cuh);
//   dV  += P^T dO, dK += dS^T Q          RS: the accumulators of S^T and dP^T
//          are the A fragments (as P in the forward), dO and Q read
//          transposed (MN-major);
//   dQ   = dS K                          SS with both operands MN-major: dS^T
//          goes to shared memory; the warpgroups split dQ's tile (by query
//          rows when kBlockM = 128, by head-dim halves at d=128-256
//          with 64, or each over its own keys at d=32-96 with 64) and add it
//          to the accumulator: through a shared buffer that the TMA unit
//          reduce-adds (where shared memory has room, see kDQStaged), else
//          with vectorised fp32 reductions.
// Under the head-dim split, dV += P^T dO and dK += dS^T Q are SS instead
// (P^T and dS^T K-major from shared memory, dO and Q MN-major), issued with
// dQ's product once both warpgroups' halves are written.
// The keys-as-rows orientation puts the reductions of dV and dK (over
// queries) inside the MMAs' K dimension, so nothing crosses warpgroups but
// dS^T, once per tile (not at all when each takes its own keys).
//
// Warp roles. Warpgroup 0 is the producer (setmaxnreg.dec): one elected
// lane issues TMA loads of K and V once and of Q and dO per query tile;
// where dQ is staged, its second warp is the dQ writer, which passes each
// consumer warpgroup's staged dQ part to the TMA unit as a reduce-add into
// the accumulator (FlashAttention-3's dQ path; in the deterministic mode
// the second and third warps, taking the tiles in turn, kDQWriters); the
// rest of the warpgroup exits. Warpgroups 1 and 2 are the consumers
// (setmaxnreg.inc); each stages the tile's LSE (+inf past seqlen_q so P = 0
// there) and D through its own shared buffer, one row per thread, on a
// named barrier of its own.
//
// Pipeline. kStages buffers of (Q, dO) on mbarriers:
//   kv_full       K and V landed;
//   kv_empty      every consumer warp has finished the item's last MMA
//                 reading K and V (the next item's may load);
//   full[s]       stage s's Q and dO landed (TMA transaction bytes);
//   empty[s]      every consumer warp has finished its MMAs reading stage s;
//   item_full[n], item_empty[n]   work item slot n written, and taken by
//                 every consumer warp and the dQ writers.
// Stages, phases and double buffers count a CTA's tiles over all its items
// (WorkPosition). With two stages (the default wherever dQ's staging still
// fits) a tile's products go dV, dQ, then dK, and dQ's store runs under dK
// (kDQUnderLastMma; with 128-query tiles dK runs on under the next tile's
// S^T and dP^T, kDKIntoNextTile); with one, dV and dK go first so that the
// stage is released before dQ's product.
// dS^T (and P^T) is double-buffered: one named barrier per tile (both
// warpgroups' halves written; only the warpgroup's own when it takes its
// own keys) also proves that the buffer of two tiles back is free, since
// each warpgroup waits for its MMAs reading it before reaching the next one.
// Rows past seqlen are zero-filled by TMA. A packed varlen batch
// (kVarlen; common/sequence.cuh) offsets every tile by its sequence's first
// rows; rows of the next sequence that a tile reaches are masked (keys past
// seqlen_k see no query, queries past seqlen_q get LSE +inf: P = 0) and
// never stored.
//
// The generator's prelude defines flashjit::cfg (kHeadDimQK, kHeadDimV,
// kBlockM, kBlockN, kWarps, kStages, kSoftcap, kProducerRegisters,
// kConsumerRegisters, Element, Mask). The host twin of the derived
// constants is generator/bwd_sm90_traits.cpp.
#pragma once

#include "bwd_rowwise.cuh"
#include "common/block_map.cuh"
#include "common/bwd_params.cuh"
#include "common/mask.cuh"
#include "common/ptx.cuh"
#include "common/sequence.cuh"
#include "common/sm90.cuh"
#include "common/sm90_wgmma.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_sm90 {

using namespace cfg;
using Ops = ElementOps<Element>;
// Each sequence's lengths and rows: dense, or a packed varlen batch.
using Sequence = SequenceInfo<kVarlen, false, 0, kBlockN>;
// A caller's mask_mod walks the query tiles its block map lists
// (bwd_block_map.cuh), hidden ones never loaded, and calls mask_mod only on
// the ones it does not show whole.
constexpr bool kBlockMap = Modifiers::kMask;
// Resident CTAs over work items, or one CTA per item (the same loop, which
// then runs once: its position is a constant the compiler folds).
constexpr bool kResident = sm90_backward_resident(Modifiers::kScore, Modifiers::kMask);

// The tiled head dims (32, 64, 96, 128, 192 or 256;
// common/fwd_sm90_layout.cuh) of Q and K, and of V and dO (they may differ,
// e.g. 192/128): a problem's between has zero columns past its own (TMA
// fills them), so S^T, dP^T and the products keep them zero; dK, dV and dQ
// store and reduce only the problem's columns.
constexpr int kHeadDim = sm90_backward_tile_head_dim(kHeadDimQK, kHeadDimV);
constexpr int kHeadDimVTile = sm90_backward_tile_head_dim(kHeadDimV, kHeadDimQK);
constexpr int kThreads = kWarps * 32;
constexpr int kConsumerWarps = 8;
// The head-dim split wherever either tile is 192 or 256 wide.
constexpr bool kSplitHeadDim = sm90_backward_splits_head_dim(kHeadDimQK, kHeadDimV);
// Q, K, V and dO as swizzle rows of kAtomCols columns (64: 128 bytes; 32,
// where a tile is 32, 96 or 192 wide: 64 bytes, so that a 192's halves of
// 96 columns start on a row) in 8-row atoms of kAtomBytes.
constexpr int kAtomCols = sm90_backward_swizzle_columns(kHeadDimQK, kHeadDimV);
constexpr int kColBlocks = kHeadDim / kAtomCols;        // swizzle columns of Q, K
constexpr int kVColBlocks = kHeadDimVTile / kAtomCols;  // and of V, dO
constexpr int kRowBytes = 2 * kAtomCols;
constexpr int kAtomBytes = 8 * kRowBytes;
constexpr int kKStepsPerRow = kAtomCols / 16;  // k16 steps in one swizzle row
// dS^T (and P^T) keep 64 queries (128 bytes) per swizzle row.
constexpr int kDsRowBytes = 128;

constexpr int kSN = kSplitHeadDim ? kBlockM / 2 : kBlockM;    // query columns of a warpgroup's S^T
constexpr int kKN = kSplitHeadDim ? kHeadDim / 2 : kHeadDim;  // its columns of dK
constexpr int kVN = kSplitHeadDim ? kHeadDimVTile / 2 : kHeadDimVTile;  // and of dV
// Loops over both head dims' column blocks or n8 tiles at once, each side
// guarded, so that equal head dims interleave K with V (Q with dO, dK with
// dV) as one loop.
constexpr int kMaxColBlocks = kColBlocks > kVColBlocks ? kColBlocks : kVColBlocks;
constexpr int kMaxKVN = kKN > kVN ? kKN : kVN;

// Tiles as swizzled column blocks ([col block][row][kRowBytes]).
constexpr int kKVColBlockBytes = kBlockN * kRowBytes;
constexpr int kKTileBytes = kColBlocks * kKVColBlockBytes;
constexpr int kVTileBytes = kVColBlocks * kKVColBlockBytes;
constexpr int kQColBlockBytes = kBlockM * kRowBytes;
constexpr int kQTileBytes = kColBlocks * kQColBlockBytes;    // one Q tile
constexpr int kDOTileBytes = kVColBlocks * kQColBlockBytes;  // one dO tile
// dS^T: keys as rows, queries as columns.
constexpr int kDsColBlockBytes = kBlockN * kDsRowBytes;
constexpr int kDsBytes = (kBlockM / 64) * kDsColBlockBytes;
// Under the head-dim split, P^T follows dS^T in each buffer.
constexpr int kDsBufferBytes = (kSplitHeadDim ? 2 : 1) * kDsBytes;

// Bytes, relative to the 1024-byte aligned base of dynamic shared memory.
constexpr int kOffsetK = 0;
constexpr int kOffsetV = kOffsetK + kKTileBytes;
constexpr int kOffsetQ = kOffsetV + kVTileBytes;
constexpr int kOffsetDO = kOffsetQ + kStages * kQTileBytes;
constexpr int kOffsetDS = kOffsetDO + kStages * kDOTileBytes;  // 2 buffers
// Per consumer warpgroup, two buffers of [LSE | D][kSN] fp32: the
// statistics of its S^T columns.
constexpr int kStatsBytes = 2 * 2 * kSN * 4;
constexpr int kOffsetStats = kOffsetDS + 2 * kDsBufferBytes;
constexpr int kOffsetDQ = kOffsetStats + 2 * kStatsBytes;  // 1024-byte aligned
constexpr int kSmemAlign = 1024;    // the 128-byte swizzle repeats every 1024 bytes
constexpr int kSmemLimit = 232448;  // sm_90's 227 KB per CTA

// Register budgets after setmaxnreg. The CTA's pool is what the launch
// allocated, 168 per thread (65536 / 384, rounded down to a multiple of 8):
// the consumers' increase must be covered by what the producer gives back,
// or setmaxnreg.inc waits forever (seen: 240/32 hung every launch).
// kProducerRegisters and kConsumerRegisters come from the prelude
// (generator/warp_roles.cpp).
constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;

constexpr int kSRegisters = kSN / 2;  // S^T (and dP^T) accumulators per thread
constexpr int kSTiles = kSN / 8;      // n8 column (query) tiles of S^T
constexpr int kSSteps = kSN / 16;     // S^T's columns as k16 steps of dV and dK
constexpr int kKRegisters = kKN / 2;  // dK accumulators per thread
constexpr int kVRegisters = kVN / 2;  // dV accumulators per thread
// k16 steps of S^T and of dP^T: over the problem's columns only (the
// tile's past them are zeros, which add nothing).
constexpr int kQKSteps = (kHeadDimQK + 15) / 16;
constexpr int kVSteps = (kHeadDimV + 15) / 16;
constexpr int kPSteps = kBlockM / 16;  // k16 steps of dV and dK
// dQ's tile (kBlockM x head dim) over the two warpgroups, three ways:
//   rows      (kBlockM = 128): each warpgroup 64 query rows, over all keys;
//   columns   (kBlockM = 64, head dim 128 to 256): each half the head
//             dim, over all keys;
//   own keys  (kBlockM = 64, head dim 32, 64 or 96): each the whole tile over its own
//             64 keys, both adding to the accumulator (twice the reductions,
//             but no dS^T exchange: the warpgroups never wait for each other).
// Each warpgroup's product is 64 x kDQN, whole swizzle columns of K.
constexpr bool kDQSplitRows = kBlockM == 128;
constexpr bool kDQOwnKeys = sm90_backward_dq_own_keys(kHeadDimQK, kHeadDimV, kBlockM);
constexpr int kDQN = kDQSplitRows || kDQOwnKeys ? kHeadDim : kHeadDim / 2;
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
constexpr int kDQBoxColumns = 32;  // 128 bytes of fp32
constexpr int kDQBoxBytes = 64 * kDQBoxColumns * 4;
constexpr int kDQStageBytes = kDQN / kDQBoxColumns * kDQBoxBytes;  // one warpgroup's part
// kv_full, kv_empty, item_full[2], item_empty[2], full[kStages],
// empty[kStages], then the two work item slots.
constexpr int kBarrierCount = 6 + 2 * kStages;
constexpr int kBarrierBytes = 8 * kBarrierCount + 8;
constexpr bool kDQStaged = kOffsetDQ + 2 * kDQStageBytes + kBarrierBytes + kSmemAlign <= kSmemLimit;
constexpr int kOffsetBarriers = kOffsetDQ + (kDQStaged ? 2 * kDQStageBytes : 0);
constexpr int kSmemUsed = kOffsetBarriers + kBarrierBytes;

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
// causal 3000 332.8 -> 318.2 (docs/PERF.md, thirtieth session).
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
static_assert(kWarps == 12, "one producer warpgroup + two consumers");
static_assert(kStages >= 1 && kStages <= 3, "1 to 3 Q/dO buffers");
static_assert(!kDeterministic || kDQStaged,
              "the deterministic sm90 backward orders dQ's TMA reduce-adds: dQ staged");
static_assert(kDQN % kAtomCols == 0, "dQ parts are whole swizzle columns of K");
static_assert(kKRegisters + kVRegisters + 2 * kSRegisters <= 200,
              "dK, dV, S^T and dP^T must fit the consumers' registers");
static_assert(2 * kConsumerRegisters + kProducerRegisters <= 3 * kLaunchRegisters,
              "the consumers' setmaxnreg.inc would wait for registers nobody frees");
static_assert(kSmemUsed + kSmemAlign <= kSmemLimit, "shared memory exceeds sm_90's 227 KB");

// A wgmma descriptor of Q, K, V or dO, in their swizzle rows.
__device__ __forceinline__ u64 qkv_descriptor(u32 addr, u32 lbo, u32 sbo) {
  return smem_descriptor_swizzled<kRowBytes>(addr, lbo, sbo);
}
constexpr float kLog2e = 1.4426950408889634f;

// A k16 step count as a type, so that one lambda unrolls S^T's (Q/K head
// dim) and dP^T's (V head dim) loops each to its own length.
template <int N>
struct KSteps {
  static constexpr int value = N;
};

// A work item's keys: its first key, KV head and batch entry, from its place
// in the work order: sections of p.dispatch_section (KV head, batch) pairs
// (the last may hold fewer), key blocks outer within a section, so that a
// section's heaviest items under a mask (the first key blocks) start first
// (BwdSm90Traits::dispatch_section says why). Each role computes them after
// its setmaxnreg: values live across the register reallocation are spilled
// (at d = 256, 0 -> 68 bytes when computed once up front).
struct CtaKeys {
  int n0, kv_head, batch;
};
__device__ __forceinline__ CtaKeys cta_keys(const BwdParams &p, int item) {
  const int heads_kv = p.heads_q / p.heads_per_kv;
  const int pairs = heads_kv * p.batch;
  const int n_blocks = p.work_items / pairs;
  const int section_ctas = p.dispatch_section * n_blocks;
  const int section = item / section_ctas;
  const int in_section = item - section * section_ctas;
  const int first_pair = section * p.dispatch_section;
  const int section_pairs = min(p.dispatch_section, pairs - first_pair);
  const int pair = first_pair + in_section % section_pairs;
  return {in_section / section_pairs * kBlockN, pair % heads_kv, pair / heads_kv};
}

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

// dst[0..1] += {a, b}: one vectorised reduction (sm_90) instead of two.
__device__ __forceinline__ void red_add_v2(float *dst, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(dst), "f"(a), "f"(b) : "memory");
}

// A role's place in the CTA's sequence of work items, in one register (the
// consumers have none to spare, the producer warpgroup runs on
// kProducerRegisters): items taken mod 4 (slot n % 2 and its phase), K/V
// loads mod 2 (kv_full's and kv_empty's phase), and Q/dO tiles mod
// 2 kStages (a tile's stage, the stage's phase and the double buffers'
// index all repeat with that period).
struct WorkPosition {
  u32 bits = 0;  // [1:0] items, [2] K/V loads, [31:3] tiles
  __device__ __forceinline__ u32 items() const { return bits & 3u; }
  __device__ __forceinline__ u32 kv_loads() const { return (bits >> 2) & 1u; }
  __device__ __forceinline__ u32 tiles() const { return bits >> 3; }
  __device__ __forceinline__ void next_item() { bits = (bits & ~3u) | ((bits + 1) & 3u); }
  __device__ __forceinline__ void next_kv_load() { bits ^= 4u; }
  __device__ __forceinline__ void add_tiles(int count) {
    bits = ((tiles() + u32(count)) % u32(2 * kStages)) << 3 | (bits & 7u);
  }
};

}  // namespace bwd_sm90
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::bwd_sm90::kThreads, 1)
    flashjit_bwd_sm90(const flashjit::BwdParams p,
                      const __grid_constant__ flashjit::TmaDescriptor tma_q,
                      const __grid_constant__ flashjit::TmaDescriptor tma_k,
                      const __grid_constant__ flashjit::TmaDescriptor tma_v,
                      const __grid_constant__ flashjit::TmaDescriptor tma_do,
                      const __grid_constant__ flashjit::TmaDescriptor tma_dq_accum) {
  using namespace flashjit;
  using namespace flashjit::bwd_sm90;
  const float kInf = __int_as_float(0x7f800000);

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const u32 smem = (smem_address(smem_raw) + kSmemAlign - 1) & ~u32(kSmemAlign - 1);
  const u32 bar_base = smem + kOffsetBarriers;
  const u32 kv_full = bar_base;
  const u32 kv_empty = bar_base + 8;
  auto full = [&](int s) { return bar_base + 8 * (6 + s); };
  auto empty = [&](int s) { return bar_base + 8 * (6 + kStages + s); };
  // The work items, passed from the producer (which fetches them) to the
  // consumers and the dQ writer through two slots: item n in slot n % 2,
  // announced on item_full and taken by every reading warp on item_empty.
  auto item_full = [&](u32 n) { return bar_base + 8 * (2 + n % 2); };
  auto item_empty = [&](u32 n) { return bar_base + 8 * (4 + n % 2); };
  auto item_slot = [&](u32 n) { return bar_base + 8 * kBarrierCount + 4 * (n % 2); };
  constexpr int kItemReaders = kConsumerWarps + (kDQStaged ? kDQWriters : 0);
  // Item n, read by a whole warp; lane 0 reads and hands the slot back.
  auto read_item = [&](u32 n) {
    if constexpr (!kResident) return n == 0 ? static_cast<int>(blockIdx.x) : p.work_items;
    mbarrier_wait(item_full(n), (n / 2) & 1);
    int item = 0;
    if (threadIdx.x % 32 == 0) {
      item = ld_shared_s32(item_slot(n));
      mbarrier_arrive(item_empty(n));
    }
    return __shfl_sync(0xffffffffu, item, 0);
  };
  // The stats are read through a generic pointer: the same bytes as `smem`.
  float *const stats =
      reinterpret_cast<float *>(smem_raw + (smem - smem_address(smem_raw)) + kOffsetStats);

  const int tid = threadIdx.x;
  const int warpgroup = tid / 128;
  // The lengths of a dense batch (a packed one's come from its sequence).
  const int dense_seqlen_q = p.seqlen_q;
  const int dense_seqlen_k = p.seqlen_k;
  const i64 dense_offset = static_cast<i64>(dense_seqlen_k) - dense_seqlen_q;

  // The query tiles of the CTA's sequence (common/sequence.cuh) that see any
  // of these keys: m_blocks m-blocks from m_block_begin (under a block map,
  // the count of the row at p.block_map offset map_row, whose entries name
  // them) for each query head of the group, walked as tile_head and
  // tile_slot say; none when the keys lie past the
  // sequence's (a shorter sequence of a varlen batch). Each role builds the
  // sequence and its tiles after its setmaxnreg: a value live across the
  // register reallocation is spilled to local memory.
  struct QueryTiles {
    int m_block_begin, m_blocks, iterations, map_row;
  };
  // Dense, everything comes from the lengths above, computed where they were
  // before sequences: the register allocation at d = 256 is at the edge (the
  // lengths computed after setmaxnreg spilled 68 bytes against 24), and the
  // dense kernel's sequence dies unused.
  // The row of (batch, KV head, key block n0 / kBlockN) in the block map.
  auto map_row_index = [&](int batch, int kv_head, int n0) -> i64 {
    return batch * p.block_map_batch_stride + kv_head * p.block_map_head_stride + n0 / kBlockN;
  };
  auto query_tiles = [&](const Sequence &seq, int n0, int batch, int kv_head) {
    if constexpr (kBlockMap) {
      if (kVarlen && n0 >= seq.seqlen_k) return QueryTiles{0, 0, 0, 0};
      const int row = static_cast<int>(map_row_index(batch, kv_head, n0) * p.block_map_row_stride);
      const int count = p.block_map[row];
      return QueryTiles{0, count, count * p.heads_per_kv, row};
    } else if constexpr (kVarlen) {
      if (n0 >= seq.seqlen_k) return QueryTiles{0, 0, 0, 0};
      const TileSpan span =
          visible_query_tiles<Mask>(p, seq.seqlen_q, n0, kBlockN, seq.offset, kBlockM);
      return QueryTiles{span.first, span.count, span.count * p.heads_per_kv, 0};
    } else {
      const TileSpan span =
          visible_query_tiles<Mask>(p, dense_seqlen_q, n0, kBlockN, dense_offset, kBlockM);
      return QueryTiles{span.first, span.count, span.count * p.heads_per_kv, 0};
    }
  };
  // The walk over a CTA's tiles: tile `it` is query head kv_head *
  // heads_per_kv + tile_head(it) and the tile_slot(it)-th of the CTA's
  // m-blocks. The resident kernels and the deterministic mode walk the
  // m-blocks last first, the group's heads inner. Under a causal mask every
  // key block that sees a query tile then reaches it at the same place in
  // its walk (the earlier key blocks see more tiles, but at the start,
  // which now comes last), earlier under a window: the CTAs of a (KV head,
  // batch) pair walk Q, dO and dQ's accumulator in step, so L2 serves them
  // once. Head by head with the m-blocks ascending, key block j reached
  // m-block m at step m - 2j of a head: H200, bf16, 16k tokens, TFLOP/s,
  // that walk -> this one, d=128 causal 2k / 8k / 16k 362.8 / 485.0 /
  // 482.3 -> 367.6 / 497.3 / 526.2, d=96 8k 379.8 -> 393.8, GQA 32/8 3000
  // 425.8 -> 430.1; full masks, d=64 and d=256 within 1% (docs/PERF.md,
  // twenty-sixth session). The deterministic mode needs
  // this walk: a query tile's dQ takes the key blocks' adds in dispatch
  // order (key blocks ascending), so no CTA waits for one that lags it (the
  // ascending walk ran 0.72x the default mode there, d=128 8k causal; the
  // shortest-first dispatch that also avoids it, FlashAttention-3's, was
  // 0.97x there but left the longest CTAs to the end: GQA 32/8 d=64 4k
  // causal 0.71x).
  // A CTA per item (a caller's score_mod or mask_mod) takes this walk too
  // under a mask_mod alone up to d = 128 (causal as a mask_mod, d=128 8k,
  // H200: see docs/PERF.md, twenty-eighth session); with a score_mod, or
  // at d > 128, the walk its speed was measured with, head by head, the
  // m-blocks ascending (this one spilled 16 bytes of a d=256 block-map
  // kernel).
  // (Unsigned: a signed division by the run-time group size took registers
  // that the dQ writer, on kProducerRegisters, does not have: 92 bytes
  // spilled at d=128 under a mask_mod.)
  constexpr bool kLastFirst =
      kDeterministic || kResident || (!Modifiers::kScore && kHeadDim <= 128);
  auto tile_head = [&](const QueryTiles &t, int it) -> int {
    if constexpr (kLastFirst) return static_cast<int>(u32(it) % u32(p.heads_per_kv));
    return it / t.m_blocks;
  };
  auto tile_slot = [&](const QueryTiles &t, int it) -> int {
    if constexpr (kLastFirst)
      return t.m_blocks - 1 - static_cast<int>(u32(it) / u32(p.heads_per_kv));
    return it % t.m_blocks;
  };
  // Tile `it`'s m-block, with kBlockMapFull under a block map where mask_mod
  // shows all of it.
  auto tile_entry = [&](const QueryTiles &t, int it) -> int {
    if constexpr (kBlockMap) return p.block_map[t.map_row + 1 + tile_slot(t, it)];
    return t.m_block_begin + tile_slot(t, it);
  };
  auto entry_m_block = [](int entry) { return kBlockMap ? block_map_tile(entry) : entry; };

  if (tid == 0) {
    mbarrier_init(kv_full, 1);
    mbarrier_init(kv_empty, kConsumerWarps);
#pragma unroll
    for (u32 n = 0; n < 2; ++n) {
      mbarrier_init(item_full(n), 1);
      mbarrier_init(item_empty(n), kItemReaders);
    }
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), kConsumerWarps);
    }
    fence_barrier_init();
  }
  __syncthreads();

  // ---- producer ----------------------------------------------------------------
  if (warpgroup == 0) {
    setmaxnreg_dec<kProducerRegisters>();
    if (kDQStaged && tid / 32 >= 1 && tid / 32 <= kDQWriters) {
      // A dQ writer: hands each consumer warpgroup's staged part to the
      // TMA unit (a reduce-add into the accumulator), so the consumers only
      // store to shared memory and arrive, never wait for each other or
      // for the issue. Its barrier phases: one "free" per warpgroup up
      // front (the writer of the CTA's tile -1), then per tile of its own
      // "full" in and "free" out.
      const int lane = tid % 32;
      const int writer = kDQWriters == 2 ? tid / 32 - 1 : 0;
      const int full_id = kBarrierDQFull + 4 * writer, free_id = kBarrierDQFree + 4 * writer;
      if (writer == dq_writer_of(~0u)) {
#pragma unroll
        for (int wg = 0; wg < 2; ++wg) named_barrier_arrive(free_id + wg, kDQBarrierThreads);
      }
      for (WorkPosition at;; at.next_item()) {
        const int item = read_item(at.items());
        if (item >= p.work_items) break;
        const CtaKeys keys =
            cta_keys(p, item);  // a lambda below captures them: no structured binding
        const int n0 = keys.n0, kv_head = keys.kv_head, batch = keys.batch;
        const Sequence seq(p, batch);
        const QueryTiles tiles = query_tiles(seq, n0, batch, kv_head);
        const int iterations = tiles.iterations;
        for (int it = 0; it < iterations; ++it) {
          if (dq_writer_of(at.tiles() + it) != writer) continue;
          const int head = kv_head * p.heads_per_kv + tile_head(tiles, it);
          const int m_block = entry_m_block(tile_entry(tiles, it));
          const int m0 = m_block * kBlockM;
          // The accumulator's row of query q of `head`.
          auto accum_row = [&](int q) {
            return kVarlen ? seq.workspace_row(p, head, q)
                           : (static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + q;
          };
          if constexpr (kDeterministic) {
            // A tile's dQ goes in after that of every key block before this
            // one that sees the tile, always in that order (so the fp32 sums
            // are the same every run): wait until the tile's semaphore has
            // counted them. They were dispatched before this CTA (key blocks
            // ascend within a dispatch section), so they never wait for it;
            // and walking the tiles last first (tile_slot) they reach a
            // shared tile no later in their walk than this CTA does.
            int before = 0;
            if constexpr (kBlockMap) {
              // Listed in key block nb's row: its kind there is not hidden.
              // (The writer runs on kProducerRegisters: one pointer and a
              // stride, no 64-bit index per block.)
              const int stride = p.block_map_row_stride - 1;
              const unsigned char *kinds =
                  p.block_kinds + map_row_index(batch, kv_head, 0) * stride + m_block;
              for (int nb = lane; nb * kBlockN < n0; nb += 32) before += kinds[nb * stride] != 0;
            } else {
              for (int nb = lane; nb * kBlockN < n0; nb += 32) {
                const QueryTiles seen = query_tiles(seq, nb * kBlockN, batch, kv_head);
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
      return;
    }
    if (tid / 32 != 0) return;
    const bool leader = elect_one();
    if (!leader) return;
    tma_prefetch_descriptor(&tma_q);
    tma_prefetch_descriptor(&tma_do);
    int item = static_cast<int>(blockIdx.x);
    for (WorkPosition at;; at.next_item()) {
      // A slot is written again once every reader has taken the item two
      // back (a fresh barrier's parity-1 wait passes at once).
      if constexpr (kResident) {
        const u32 n = at.items();
        mbarrier_wait(item_empty(n), ((n / 2) & 1) ^ 1);
        st_shared_s32(item_slot(n), item);
        mbarrier_arrive(item_full(n));
      }
      if (item >= p.work_items) return;
      const auto [n0, kv_head, batch] = cta_keys(p, item);
      const Sequence seq(p, batch);
      const QueryTiles tiles = query_tiles(seq, n0, batch, kv_head);
      const int iterations = tiles.iterations;
      const int k_row0 = kVarlen ? static_cast<int>(seq.k_row0) : 0;
      const int q_row0 = kVarlen ? static_cast<int>(seq.q_row0) : 0;
      const int outer = kVarlen ? seq.outer : batch;
      if (iterations > 0) {
        // The item before's K and V are free once the consumers' last MMAs
        // have read them; its epilogue runs under these loads.
        mbarrier_wait(kv_empty, at.kv_loads() ^ 1);
        at.next_kv_load();
        mbarrier_arrive_expect_tx(kv_full, kKTileBytes + kVTileBytes);
#pragma unroll
        for (int cb = 0; cb < kMaxColBlocks; ++cb) {
          if (cb < kColBlocks)
            tma_load_4d(smem + kOffsetK + cb * kKVColBlockBytes, &tma_k, kv_full, cb * kAtomCols,
                        k_row0 + n0, kv_head, outer);
          if (cb < kVColBlocks)
            tma_load_4d(smem + kOffsetV + cb * kKVColBlockBytes, &tma_v, kv_full, cb * kAtomCols,
                        k_row0 + n0, kv_head, outer);
        }
      }
      for (int it = 0; it < iterations; ++it) {
        const u32 tile = at.tiles() + it;
        const int stage = static_cast<int>(tile % kStages);
        const u32 round = tile / kStages;
        // Under a block map the tile's query rows are a load, issued before
        // the wait so that its latency hides under it (without one they are
        // arithmetic, kept after: live across the wait they spilled at d=256).
        int m0 = 0;
        if constexpr (kBlockMap) m0 = entry_m_block(tile_entry(tiles, it)) * kBlockM;
        // The first round passes at once (parity 1 of a fresh barrier is the
        // phase before its first); later ones wait for the consumers' release.
        mbarrier_wait(empty(stage), (round & 1) ^ 1);
        const int head = kv_head * p.heads_per_kv + tile_head(tiles, it);
        if constexpr (!kBlockMap) m0 = entry_m_block(tile_entry(tiles, it)) * kBlockM;
        {
          mbarrier_arrive_expect_tx(full(stage), kQTileBytes + kDOTileBytes);
          const u32 q_dst = smem + kOffsetQ + stage * kQTileBytes;
          const u32 do_dst = smem + kOffsetDO + stage * kDOTileBytes;
#pragma unroll
          for (int cb = 0; cb < kMaxColBlocks; ++cb) {
            if (cb < kColBlocks)
              tma_load_4d(q_dst + cb * kQColBlockBytes, &tma_q, full(stage), cb * kAtomCols,
                          q_row0 + m0, head, outer);
            if (cb < kVColBlocks)
              tma_load_4d(do_dst + cb * kQColBlockBytes, &tma_do, full(stage), cb * kAtomCols,
                          q_row0 + m0, head, outer);
          }
        }
      }
      at.add_tiles(iterations);
      // The next item: the hardware's dispatch order over resident CTAs.
      if constexpr (!kResident) return;
      item = static_cast<int>(gridDim.x) + atomicAdd(p.work_counter, 1);
    }
  }

  // ---- consumers ---------------------------------------------------------------
  setmaxnreg_inc<kConsumerRegisters>();
  WorkPosition at;  // after the loop: the CTA's tile count, for the last "free"
  for (;; at.next_item()) {
    const int item = read_item(at.items());
    if (item >= p.work_items) break;
    const CtaKeys keys = cta_keys(p, item);  // lambdas below capture them: no structured binding
    const int n0 = keys.n0, kv_head = keys.kv_head, batch = keys.batch;
    const Sequence seq(p, batch);
    const int seqlen_q = kVarlen ? seq.seqlen_q : dense_seqlen_q;
    const int seqlen_k = kVarlen ? seq.seqlen_k : dense_seqlen_k;
    const i64 offset = kVarlen ? seq.offset : dense_offset;  // bottom-right alignment
    // The LSE's (and D's, and the dQ accumulator's) row of query q of `head`.
    auto lse_row = [&](int head, int q) -> i64 {
      if constexpr (kVarlen) return seq.lse_row(p, head, q);
      return (static_cast<i64>(batch) * p.heads_q + head) * seqlen_q + q;
    };
    // Its row of D and of the dQ accumulator (common/sequence.cuh).
    auto workspace_row = [&](int head, int q) -> i64 {
      if constexpr (kVarlen) return seq.workspace_row(p, head, q);
      return lse_row(head, q);
    };
    const QueryTiles tiles = query_tiles(seq, n0, batch, kv_head);
    const int iterations = tiles.iterations;
    const int cwg = warpgroup - 1;  // consumer warpgroup
    const int ctid = tid % 128;
    const int warp = ctid / 32;  // rows (keys) 16*warp.. of the warpgroup's 64
    const int lane = tid % 32;
    const int group = lane / 4;      // fragment row (and row + 8)
    const int quad_lane = lane % 4;  // fragment column pair
    // This warpgroup's first key (of the CTA's), first query column of S^T (of
    // the tile's) and first columns of dK and of dV.
    const int key0 = kSplitHeadDim ? 0 : cwg * 64;
    const int query0 = kSplitHeadDim ? cwg * kSN : 0;
    const int k_col0 = kSplitHeadDim ? cwg * kKN : 0;
    const int v_col0 = kSplitHeadDim ? cwg * kVN : 0;

    // Descriptor bases from run-time shared addresses (see common/sm90.cuh).
    // K-major: this warpgroup's 64 rows of K and V (the A operands of S^T, dP^T).
    const u64 k_rows_desc = qkv_descriptor(smem + kOffsetK + key0 * kRowBytes, 16, kAtomBytes);
    const u64 v_rows_desc = qkv_descriptor(smem + kOffsetV + key0 * kRowBytes, 16, kAtomBytes);
    // MN-major K for dQ = dS K: all the CTA's keys (or the warpgroup's own),
    // this warpgroup's columns.
    const u64 k_cols_desc =
        qkv_descriptor(smem + kOffsetK +
                           (kDQOwnKeys     ? cwg * 64 * kRowBytes
                            : kDQSplitRows ? 0
                                           : cwg * (kDQN / kAtomCols) * kKVColBlockBytes),
                       kKVColBlockBytes, kAtomBytes);

    float acc_dk[kKRegisters], acc_dv[kVRegisters];
#pragma unroll
    for (int i = 0; i < kKRegisters; ++i) acc_dk[i] = 0.f;
#pragma unroll
    for (int i = 0; i < kVRegisters; ++i) acc_dv[i] = 0.f;

    // LSE (+inf past seqlen_q, so P = 0 there) and D of query column `ctid`
    // of this warpgroup's S^T in tile `it`, loaded one tile ahead: the L2
    // latency hides under a whole tile's work instead of stalling the store
    // before the barrier. Stored as loaded, and taken to base 2 where it is
    // read: ptxas hoisted that multiply to just after the load, where it
    // waited out the load's latency, and the stats barrier made the
    // warpgroup's other warps wait with it (ncu, d=128 8k: 2% + 8% of the
    // kernel's stall samples).
    // The tile's map entry comes with them (`entry`, read once a tile).
    auto load_stats = [&](int it, float &lse, float &d, int &entry) {
      lse = kInf;
      d = 0.f;
      const int head = kv_head * p.heads_per_kv + tile_head(tiles, it);
      entry = tile_entry(tiles, it);
      const int q = entry_m_block(entry) * kBlockM + query0 + ctid;
      if (ctid < kSN && q < seqlen_q) {
        lse = p.lse[lse_row(head, q)];
        d = p.dsum[workspace_row(head, q)];
      }
    };
    float next_lse, next_d;
    int next_entry = 0;
    if (iterations > 0) load_stats(0, next_lse, next_d, next_entry);

    // The transposed tile (16 bits, 128-byte swizzled, keys as rows) of this
    // warpgroup's S^T-shaped fragments: dS^T for dQ, and P^T under the split.
    auto store_transposed = [&](u32 tile, const u32(&frag)[kSSteps][4]) {
#pragma unroll
      for (int kk = 0; kk < kSSteps; ++kk)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // frag[kk][j]: n8 tile 2kk + j/2, row half j%2.
          const int key = key0 + warp * 16 + group + (j % 2) * 8;
          const int q = query0 + (2 * kk + j / 2) * 8 + quad_lane * 2;
          const u32 addr = tile + (q / 64) * kDsColBlockBytes + key * kDsRowBytes +
                           ((((q % 64) / 8) ^ (key % 8)) << 4) + (q % 8) * 2;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(frag[kk][j]) : "memory");
        }
    };

    // dQ's part = dS K (this warpgroup's rows or columns, see kDQN), issued as
    // one commit group; reduce_dq adds it to the fp32 accumulator once waited.
    // The accumulator is declared per tile: one live across the loop would
    // hold its registers through everything else.
    using DqAccumulator = float[kDQRegisters];
    auto issue_dq = [&](DqAccumulator &acc_dq, u32 ds_tile) {
      const u64 ds_desc = smem_descriptor_sw128(ds_tile + (kDQSplitRows ? cwg * kDsColBlockBytes
                                                           : kDQOwnKeys ? cwg * 64 * kDsRowBytes
                                                                        : 0),
                                                kDsColBlockBytes, 1024);
      wgmma_fence_operands(acc_dq);
      wgmma_fence();
#pragma unroll
      for (int ks = 0; ks < kDQSteps; ++ks) {
        // k-step ks = keys 16ks.. = rows of both dS^T and K.
        const int off = (ks * 16 * kDsRowBytes) >> 4;
        const int k_off = (ks * 16 * kRowBytes) >> 4;
        Wgmma<Element, kDQN>::ss_tt(acc_dq, ds_desc + off, k_cols_desc + k_off, ks > 0);
      }
      wgmma_commit();
      wgmma_fence_operands(acc_dq);
    };
    auto reduce_dq = [&](const DqAccumulator &acc_dq, int head, int m0, u32 tile) {
      const int col0 = kDQSplitRows || kDQOwnKeys ? 0 : cwg * kDQN;
      if constexpr (kDQStaged) {
        // The buffer is free once the writer of the tile before has passed
        // its last reduce to the TMA unit and that has read it (a tile ago:
        // no wait in practice).
        named_barrier_sync(kBarrierDQFree + 4 * dq_writer_of(tile - 1) + cwg, kDQBarrierThreads);
        // acc_dq[4nt + 2h + c] is row 16 warp + group + 8h, column 8nt + 2 quad_lane
        // + c: 16-byte chunk (nt % 4) * 2 + quad_lane / 2 of its box's 128-byte
        // row, XORed with the row's group (row % 8). From the thread index
        // recomputed here (opaque), so no address stays live across the loop.
        const int t = opaque(static_cast<int>(threadIdx.x)) % 128;
        const int g = (t % 32) / 4;
        const u32 base =
            smem + kOffsetDQ + cwg * kDQStageBytes + (t / 32 * 16 + g) * 128 + (t % 2) * 8;
        const int swizzle = ((t % 4) / 2) ^ g;
#pragma unroll
        for (int nt = 0; nt < kDQTiles; ++nt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const u32 addr =
                base + (nt / 4) * kDQBoxBytes + h * 8 * 128 + ((((nt % 4) * 2) ^ swizzle) << 4);
            asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr),
                         "f"(acc_dq[4 * nt + 2 * h]), "f"(acc_dq[4 * nt + 2 * h + 1])
                         : "memory");
          }
        fence_proxy_async();  // the generic-proxy stores, before the TMA unit reads them
        named_barrier_arrive(kBarrierDQFull + 4 * dq_writer_of(tile) + cwg, kDQBarrierThreads);
        return;
      }
      float *const accum =
          p.dq_accum + (kVarlen ? workspace_row(head, 0)
                                : (static_cast<i64>(batch) * p.heads_q + head) * seqlen_q) *
                           kHeadDimQK;
      const int row0 = m0 + (kDQSplitRows ? cwg * 64 : 0) + warp * 16 + group;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + h * 8;
        if (row < seqlen_q) {
          float *const dst = accum + static_cast<i64>(row) * kHeadDimQK + col0 + quad_lane * 2;
#pragma unroll
          for (int nt = 0; nt < kDQTiles; ++nt)
            if (kHeadDim == kHeadDimQK || col0 + nt * 8 < kHeadDimQK)
              red_add_v2(dst + nt * 8, acc_dq[4 * nt + 2 * h], acc_dq[4 * nt + 2 * h + 1]);
        }
      }
    };

    if (iterations > 0) mbarrier_wait(kv_full, at.kv_loads());
    // dS^T's A fragments (in registers for dK), declared across the tiles:
    // with kDKIntoNextTile the last tile's dK reads them until the next
    // tile's first wait.
    u32 ds_frag[kSSteps][4];
    for (int it = 0; it < iterations; ++it) {
      // Stages, phases and double buffers count the CTA's tiles over its items.
      const u32 tile = at.tiles() + it;
      const int stage = static_cast<int>(tile % kStages);
      const int head = kv_head * p.heads_per_kv + tile_head(tiles, it);
      const int entry = next_entry;  // load_stats(it) read it
      const int m0 = entry_m_block(entry) * kBlockM;
      // mask_mod per element only where the map does not show the tile whole.
      const bool masked = !kBlockMap || !(entry & kBlockMapFull);
      const u32 q_tile = smem + kOffsetQ + stage * kQTileBytes;
      const u32 do_tile = smem + kOffsetDO + stage * kDOTileBytes;
      const u32 ds_tile = smem + kOffsetDS + (tile % 2) * kDsBufferBytes;
      mbarrier_wait(full(stage), (tile / kStages) & 1);

      // ---- S^T = K Q^T and dP^T = V dO^T ------------------------------------
      float acc_s[kSRegisters], acc_dp[kSRegisters];
      {
        const u64 q_desc = qkv_descriptor(q_tile + query0 * kRowBytes, 16, kAtomBytes);
        const u64 do_desc = qkv_descriptor(do_tile + query0 * kRowBytes, 16, kAtomBytes);
        wgmma_fence_operands(acc_s);
        wgmma_fence_operands(acc_dp);
        wgmma_fence();
        // One commit group of acc = A B^T, A this warpgroup's 64 rows of K or V
        // and B its kSN rows of the Q or dO tile, both K-major: k-step ks is
        // column block ks/4, byte (ks%4)*32 within the 128-byte row.
        auto issue = [&](float(&acc)[kSRegisters], u64 a_desc, u64 b_desc, auto steps) {
#pragma unroll
          for (int ks = 0; ks < decltype(steps)::value; ++ks) {
            const int a_off = (ks / kKStepsPerRow) * kKVColBlockBytes + (ks % kKStepsPerRow) * 32;
            const int b_off = (ks / kKStepsPerRow) * kQColBlockBytes + (ks % kKStepsPerRow) * 32;
            Wgmma<Element, kSN>::ss(acc, a_desc + (a_off >> 4), b_desc + (b_off >> 4), ks > 0);
          }
          wgmma_commit();
        };
        issue(acc_s, k_rows_desc, q_desc, KSteps<kQKSteps>{});
        issue(acc_dp, v_rows_desc, do_desc, KSteps<kVSteps>{});
        wgmma_fence_operands(acc_s);
        wgmma_fence_operands(acc_dp);
      }
      // This tile's LSE and D into the warpgroup's own buffer, and the next
      // tile's loaded. Double-buffered: buffer tile%2 was last read two tiles
      // back (in this item or the one before), and every thread of the
      // warpgroup finished those reads before the last tile's barrier, which
      // this thread has passed.
      float *const lse_tile = stats + cwg * (kStatsBytes / 4) + (tile % 2) * 2 * kSN;
      if (ctid < kSN) {
        lse_tile[ctid] = next_lse;
        lse_tile[kSN + ctid] = next_d;
      }
      if (it + 1 < iterations) load_stats(it + 1, next_lse, next_d, next_entry);
      named_barrier_sync(kBarrierStats + cwg, 128);
      wgmma_wait<0>();
      wgmma_fence_operands(acc_s);
      wgmma_fence_operands(acc_dp);
      if constexpr (kDKIntoNextTile) {
        // The tile before's dK is done too: its stage goes back.
        wgmma_fence_operands(acc_dk);
#pragma unroll
        for (int kk = 0; kk < kSSteps; ++kk) wgmma_fence_operands(ds_frag[kk]);
        if (it > 0 && lane == 0) mbarrier_arrive(empty(static_cast<int>((tile - 1) % kStages)));
      }

      // ---- P^T (in acc_s) and dS^T = P^T (dP^T - D) (in acc_dp) -------------------
      // acc[4*nt + 2*h + c] is key row (16*warp + group + 8h) of the warpgroup,
      // query column 8nt + 2*quad_lane + c of its S^T. Where an edge or the
      // key tail cuts the tile, per key the visible queries are [q_lo, q_hi]
      // in tile coordinates; P = 0 elsewhere (and so dS = 0).
      int q_lo[2] = {-1, -1}, q_hi[2] = {kBlockM, kBlockM};
      if (tile_is_cut<Mask>(p, seqlen_k, m0, kBlockM, n0, kBlockN, offset)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int key = n0 + key0 + warp * 16 + group + h * 8;
          visible_queries_in_tile<Mask>(p, seqlen_k, key, m0, kBlockM, offset, q_lo[h], q_hi[h]);
        }
      }
      const float *const dsum = lse_tile + kSN;
      // The element loop, with the modifiers or without them: a mask_mod
      // alone (no score_mod) is skipped whole on a tile the map shows whole,
      // with no per-element index or test (they ran causal-as-mask_mod at
      // 0.90x the built-in causal on the H200, ncu counting 18% more
      // instructions). Two copies from the 128-key head dims up: at d=64
      // (128-row tiles) the second spilled (56 bytes).
      constexpr bool kSkipShown = !Modifiers::kScore && Modifiers::kMask && kHeadDim >= 96;
      auto recompute = [&](auto modified) {
#pragma unroll
        for (int nt = 0; nt < kSTiles; ++nt)
#pragma unroll
          for (int c = 0; c < 2; ++c) {
            const int col = nt * 8 + quad_lane * 2 + c;
            const int q_local = query0 + col;
            const float lse = lse_tile[col] * kLog2e, d = dsum[col];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int i = 4 * nt + 2 * h + c;
              float s = acc_s[i];
              if constexpr (kSoftcap) s = tanh_approx(s * p.score_scale);
              float logit = s * p.softmax_scale_log2;  // base 2
              float grad = 1.f;                        // d score_mod / d score
              if constexpr (decltype(modified)::value)
                logit = modified_logit2<Modifiers>(p, s, batch, head, m0 + q_local,
                                                   n0 + key0 + warp * 16 + group + h * 8, seqlen_q,
                                                   seqlen_k, grad, masked);
              float prob = exp2_approx(logit - lse);
              if (q_local < q_lo[h] || q_local > q_hi[h]) prob = 0.f;
              float ds = prob * (acc_dp[i] - d);
              if constexpr (Modifiers::kScore) ds *= grad;
              if constexpr (kSoftcap) ds *= 1.f - s * s;  // d tanh
              acc_s[i] = prob;
              acc_dp[i] = ds;
            }
          }
      };
      constexpr bool kModified = Modifiers::kScore || Modifiers::kMask;
      if constexpr (kSkipShown) {
        if (masked)
          recompute(BoolConstant<true>{});
        else
          recompute(BoolConstant<false>{});
      } else {
        recompute(BoolConstant<kModified>{});
      }

      // n8 tiles 2kk and 2kk+1 of S^T are exactly the A fragment of k-step kk.
      u32 p_frag[kSSteps][4];
#pragma unroll
      for (int kk = 0; kk < kSSteps; ++kk)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          p_frag[kk][j] = Ops::pack(acc_s[8 * kk + 2 * j], acc_s[8 * kk + 2 * j + 1]);
          ds_frag[kk][j] = Ops::pack(acc_dp[8 * kk + 2 * j], acc_dp[8 * kk + 2 * j + 1]);
        }
      // MN-major dO and Q (B of dV and dK): k-step kk = query rows 16kk.. = two
      // 8-row atoms on; this warpgroup's columns of them.
      const u64 do_cols_desc = qkv_descriptor(do_tile + (v_col0 / kAtomCols) * kQColBlockBytes,
                                              kQColBlockBytes, kAtomBytes);
      const u64 q_cols_desc = qkv_descriptor(q_tile + (k_col0 / kAtomCols) * kQColBlockBytes,
                                             kQColBlockBytes, kAtomBytes);

      if constexpr (kSplitHeadDim) {
        // ---- P^T and dS^T to shared memory: both warpgroups' query halves ------
        store_transposed(ds_tile, ds_frag);
        store_transposed(ds_tile + kDsBytes, p_frag);
        fence_proxy_async();  // the generic-proxy stores, before wgmma (async proxy) reads them
        named_barrier_sync(kBarrierDs, 2 * 128);

        // ---- dV += P^T dO, dK += dS^T Q (SS) and dQ's part (kDQUnderLastMma) ---
        float acc_dq[kDQRegisters];
        if constexpr (kDQUnderLastMma) issue_dq(acc_dq, ds_tile);
        const u64 p_desc = smem_descriptor_sw128(ds_tile + kDsBytes, 16, 1024);
        const u64 ds_desc = smem_descriptor_sw128(ds_tile, 16, 1024);
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);
        wgmma_fence();
        // K-major P^T and dS^T: k-step kk is byte 32kk of the 128-byte row.
#pragma unroll
        for (int kk = 0; kk < kPSteps; ++kk)
          Wgmma<Element, kVN>::ss_bt(acc_dv, p_desc + ((kk * 32) >> 4),
                                     do_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
#pragma unroll
        for (int kk = 0; kk < kPSteps; ++kk)
          Wgmma<Element, kKN>::ss_bt(acc_dk, ds_desc + ((kk * 32) >> 4),
                                     q_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
        wgmma_commit();
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);
        // Once dV and dK are done, Q and dO of this stage are free.
        auto release_stage = [&] {
          wgmma_fence_operands(acc_dv);
          wgmma_fence_operands(acc_dk);
          if (lane == 0) mbarrier_arrive(empty(stage));
        };
        if constexpr (kDQUnderLastMma) {
          wgmma_wait<1>();  // dQ done, dV and dK running
          wgmma_fence_operands(acc_dq);
          reduce_dq(acc_dq, head, m0, tile);
          wgmma_wait<0>();
          release_stage();
        } else {
          issue_dq(acc_dq, ds_tile);
          wgmma_wait<1>();  // dV and dK done, dQ running
          release_stage();
          wgmma_wait<0>();
          wgmma_fence_operands(acc_dq);
          reduce_dq(acc_dq, head, m0, tile);
        }
      } else {
        // ---- dV += P^T dO, dK += dS^T Q (A from registers) -----------------------
        // Their accumulators and A fragments, fenced around the MMAs.
        auto fence_rs_operands = [&] {
          wgmma_fence_operands(acc_dv);
          wgmma_fence_operands(acc_dk);
#pragma unroll
          for (int kk = 0; kk < kPSteps; ++kk) {
            wgmma_fence_operands(p_frag[kk]);
            wgmma_fence_operands(ds_frag[kk]);
          }
        };
        auto issue_dk = [&] {
#pragma unroll
          for (int kk = 0; kk < kPSteps; ++kk)
            Wgmma<Element, kKN>::rs_bt(acc_dk, ds_frag[kk],
                                       q_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
        };
        fence_rs_operands();
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kPSteps; ++kk)
          Wgmma<Element, kVN>::rs_bt(acc_dv, p_frag[kk],
                                     do_cols_desc + ((kk * 16 * kRowBytes) >> 4), 1);
        if constexpr (!kDQUnderLastMma) issue_dk();
        wgmma_commit();
        wgmma_fence_operands(acc_dv);
        wgmma_fence_operands(acc_dk);

        // ---- dS^T to shared memory, while dV (and dK) run ---------------------------
        store_transposed(ds_tile, ds_frag);
        fence_proxy_async();  // the generic-proxy stores, before wgmma (async proxy) reads them
        if constexpr (kDQOwnKeys)
          named_barrier_sync(kBarrierStats + cwg, 128);  // this warpgroup's rows of dS^T
        else
          named_barrier_sync(kBarrierDs, 2 * 128);  // both warpgroups' rows

        // ---- dQ's part, reduced into the fp32 accumulator ----------------------
        // Once dV and dK are done, Q and dO of this stage are free.
        auto release_stage = [&] {
          fence_rs_operands();
          if (lane == 0) mbarrier_arrive(empty(stage));
        };
        float acc_dq[kDQRegisters];
        if constexpr (kDQUnderLastMma) {
          issue_dq(acc_dq, ds_tile);
          fence_rs_operands();
          wgmma_fence();
          issue_dk();
          wgmma_commit();
          wgmma_wait<1>();  // dV and dQ done, dK running
          fence_rs_operands();
          wgmma_fence_operands(acc_dq);
          reduce_dq(acc_dq, head, m0, tile);
          if constexpr (!kDKIntoNextTile) {
            wgmma_wait<0>();
            release_stage();
          } else if (it + 1 == iterations) {
            wgmma_wait<0>();  // the item's last dK, before its epilogue
            release_stage();
          }
        } else {
          wgmma_wait<0>();
          release_stage();
          issue_dq(acc_dq, ds_tile);
          wgmma_wait<0>();
          wgmma_fence_operands(acc_dq);
          reduce_dq(acc_dq, head, m0, tile);
        }
      }
    }
    // K and V read for the last time: the producer may load the next item's.
    if (kResident && iterations > 0) {
      // (Its address from the shared base again: kept live across the loop it
      // spilled the consumers, d=128 with a mask_mod 0 -> 28 bytes.)
      const u32 base = (smem_address(smem_raw) + opaque(kSmemAlign - 1)) & ~u32(kSmemAlign - 1);
      if (lane == 0) mbarrier_arrive(base + kOffsetBarriers + 8);
      at.next_kv_load();
    }
    at.add_tiles(iterations);

    // ---- epilogue: dK (scaled) and dV from the fragments, 8 bytes a store -----------
    // A thread holds columns 2 quad_lane, +1 of each n8 tile of its two rows;
    // lanes q and q ^ 1 swap one tile of each pair (nt, nt + 1), so that the
    // even lane stores 4 columns of tile nt and the odd lane 4 of tile
    // nt + 1: a quad writes whole 32-byte sectors, with half the stores. (One
    // 4-byte store per tile held the global store queue at short sequences,
    // where an item has few tiles: ncu, d=128 512, 10.6% of the warps'
    // samples on lg_throttle.)
    static_assert(kKN % 16 == 0 && kVN % 16 == 0, "n8 tiles in pairs");
    u16 *dk = static_cast<u16 *>(p.dk) + batch * p.dk_batch_stride + kv_head * p.dk_head_stride;
    u16 *dv = static_cast<u16 *>(p.dv) + batch * p.dv_batch_stride + kv_head * p.dv_head_stride;
    if constexpr (kVarlen) {  // the packed tensors: batch entry 0, the sequence's rows
      dk += seq.k_row0 * p.dk_row_stride - batch * p.dk_batch_stride;
      dv += seq.k_row0 * p.dv_row_stride - batch * p.dv_batch_stride;
    }
    const bool odd = quad_lane & 1;
    // Tiles nt and nt + 1 of one row, packed: the 8 bytes this lane stores,
    // at column 8 (nt + odd) + 2 (quad_lane & ~1) of the tiles' first.
    auto pair = [&](u32 a, u32 b) {
      const u32 other = __shfl_xor_sync(0xffffffffu, odd ? a : b, 1);
      return odd ? U32x2{other, b} : U32x2{a, other};
    };
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int key = n0 + key0 + warp * 16 + group + h * 8;
      // Whole n8 tiles are in or past the problem's columns (a multiple of 8).
#pragma unroll
      for (int nt = 0; nt < kMaxKVN / 8; nt += 2) {
        const int tile_col = (nt + (odd ? 1 : 0)) * 8 + 2 * (quad_lane & ~1);
        if (nt < kKN / 8) {
          const float s = p.softmax_scale;
          const U32x2 v = pair(Ops::pack(acc_dk[4 * nt + 2 * h] * s, acc_dk[4 * nt + 2 * h + 1] * s),
                               Ops::pack(acc_dk[4 * nt + 4 + 2 * h] * s,
                                         acc_dk[4 * nt + 4 + 2 * h + 1] * s));
          if (key < seqlen_k && (kHeadDim == kHeadDimQK || k_col0 + tile_col < kHeadDimQK))
            *reinterpret_cast<U32x2 *>(dk + key * p.dk_row_stride + k_col0 + tile_col) = v;
        }
        if (nt < kVN / 8) {
          const U32x2 v = pair(Ops::pack(acc_dv[4 * nt + 2 * h], acc_dv[4 * nt + 2 * h + 1]),
                               Ops::pack(acc_dv[4 * nt + 4 + 2 * h], acc_dv[4 * nt + 4 + 2 * h + 1]));
          if (key < seqlen_k && (kHeadDimVTile == kHeadDimV || v_col0 + tile_col < kHeadDimV))
            *reinterpret_cast<U32x2 *>(dv + key * p.dv_row_stride + v_col0 + tile_col) = v;
        }
      }
    }
    if constexpr (!kResident) break;
  }
  // The last "free" of the writer of the CTA's last tile (see the writer).
  // (The warpgroup from the thread index again: one kept live across the
  // loop spilled the consumers at d=64.)
  if constexpr (kDQStaged)
    named_barrier_sync(
        kBarrierDQFree + 4 * dq_writer_of(at.tiles() - 1) + static_cast<int>(threadIdx.x) / 128 - 1,
        kDQBarrierThreads);
}
