// FlashAttention-2 forward for sm_80 and newer (mma.sync tensor cores).
//
// Tiling. One CTA per (kBlockM query rows, query head, batch). Its kWarps
// warps split the Q rows (split-Q): warp w owns kWarpRows consecutive rows,
// i.e. kMTiles m16 tiles, and walks every visible K/V tile of kBlockN keys
// itself, so softmax statistics never cross warps.
//
// Pipeline. Shared memory holds the Q tile and a ring of kStages (K, V) tile
// pairs filled by cp.async (one commit group per pair); tile t+kStages-1 is in
// flight while tile t is computed. Rows are 128-byte swizzled (16-byte chunk
// index XOR row%8) so cp.async stores and ldmatrix loads are bank-conflict
// free; tails past seqlen are zero-filled by the copy itself.
//
// Per K/V tile, per warp: S = Q K^T with ldmatrix + mma.m16n8k16 (fp32
// accumulators); the score policy (common/score_policy.cuh: softcap, a
// caller's modifiers, the mask element-wise only on tiles a mask edge or
// the seqlen_k tail cuts; fully masked tiles are never visited); the online
// softmax (common/online_softmax.cuh) in base 2 with the scale folded into
// one FFMA per score and an unnormalised O; P converted to 16 bits in
// registers becomes the A operand of O += P V (V through ldmatrix.trans).
//
// Epilogue. O / rowsum is converted to 16 bits, staged through shared memory
// (reusing the Q/K/V space) and written with 16-byte coalesced stores; the
// fp32 log-sum-exp of each row goes to lse[batch, head, row]. A row that sees
// no key writes O = 0 and LSE = +inf, as FlashAttention does.
//
// Split-KV (kSplitKv, p.num_splits > 1): the grid's x holds query blocks x
// splits, and each CTA attends to its split's share of the visible key
// tiles (common/fwd_scheduler.cuh, split_share), writing O / its own row sum
// in fp32 and its LSE (-inf when it saw no key) straight from the fragments
// to the workspace for flashjit_fwd_combine, as the sm90 family does.
//
// Sequences (common/sequence.cuh): a packed batch (kVarlen) gives each
// sequence its own rows of Q/O and K/V and its lengths (loads stop at them;
// query blocks past a shorter sequence's end write nothing). A KV cache
// (kSeqUsedK, kPageSize): the batch's own key count and bottom-right offset;
// paged K/V are copied in runs of kBoxRows rows that never cross a page, each
// from its page's rows, or, where pages are not whole 16-row runs
// (Sequence::kGathered, e.g. SGLang's pages of 1), gathered row by row. A
// run (row) past the keys, or on a page index outside [0, num_pages), is
// zero-filled by cp.async without reading memory.
//
// The generator's prelude defines flashjit::cfg (kHeadDimQK, kHeadDimV,
// kBlockM, kBlockN, kWarps, kStages, kSoftcap, Element, Mask). The layout
// arithmetic is FwdSm80Layout (common/fwd_sm80_layout.cuh), which the host
// twin (generator/fwd_sm80_traits.cpp) compiles too.
#pragma once

#include "common/fwd_params.cuh"
#include "common/fwd_scheduler.cuh"
#include "common/fwd_sm80_layout.cuh"
#include "common/online_softmax.cuh"
#include "common/ptx.cuh"
#include "common/score_policy.cuh"
#include "common/sequence.cuh"
#include "common/smem_tile.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_sm80 {

using namespace cfg;
using Ops = ElementOps<Element>;
using Modifiers = cfg::Modifiers;

// The layout arithmetic the host twin (generator/fwd_sm80_traits.cpp) uses too.
constexpr FwdSm80Layout kLayout{kHeadDimQK, kHeadDimV, kBlockM, kBlockN, kWarps, kStages};
constexpr int kThreads = kLayout.threads();
constexpr int kWarpRows = kLayout.warp_rows();
constexpr int kMTiles = kLayout.m_tiles();
// Shared-memory rows are whole 64-element swizzle atoms.
constexpr int kSmemDimQK = kLayout.smem_dim_qk();
constexpr int kSmemDimV = kLayout.smem_dim_v();
// 16-byte chunks per row that hold data, and that the MMAs read (k and n
// steps are 16 wide; chunks in between are zeroed once).
constexpr int kChunksQK = kHeadDimQK / 8;
constexpr int kChunksV = kHeadDimV / 8;
constexpr int kReadChunksQK = kLayout.read_chunks_qk();
constexpr int kReadChunksV = kLayout.read_chunks_v();
constexpr int kKStepsQK = kReadChunksQK / 2;  // k16 steps of S = Q K^T
constexpr int kNTilesS = kLayout.n_tiles_s();  // n8 tiles of S
constexpr int kKStepsPV = kBlockN / 16;        // k16 steps of O += P V
constexpr int kNTilesO = kLayout.n_tiles_o();  // n8 tiles of O

constexpr int kSmemQ = kLayout.q_elements();  // elements
constexpr int kSmemK = kLayout.k_elements();
constexpr int kSmemV = kLayout.v_elements();
constexpr int kSmemStage = kLayout.stage_elements();
constexpr int kSmemElements = kLayout.smem_elements();

static_assert(kHeadDimQK % 8 == 0 && kHeadDimQK <= 256, "head_dim_qk: multiple of 8, <= 256");
static_assert(kHeadDimV % 8 == 0 && kHeadDimV <= 256, "head_dim_v: multiple of 8, <= 256");
static_assert(kBlockM % (16 * kWarps) == 0 && (kMTiles == 1 || kMTiles == 2),
              "each warp owns 16 or 32 query rows");
static_assert(kBlockN % 16 == 0, "block_n: multiple of 16 (P V k-steps)");
static_assert(kStages >= 2, "at least double buffering");
static_assert(kBlockM * kSmemDimV <= kSmemElements, "O staging reuses the Q/K/V space");
static_assert(kPackGqa == 1, "sm80 family: no packed GQA");

using Sequence = SequenceInfo<kVarlen, kSeqUsedK, kPageSize, kBlockN>;

// cp.async of rows [0, kRows) x chunks [0, kChunks) of a tile at shared
// address `tile`; rows at or past `rows_valid` are zero-filled.
template <int kRows, int kDim, int kChunks>
__device__ __forceinline__ void load_tile(u32 tile, const u16 *gmem, i64 row_stride,
                                          int rows_valid, int tid) {
  if constexpr (kThreads % kChunks == 0) {
    // Each thread keeps one chunk column and steps down the rows: one 64-bit
    // add per copy, and (for passes of 8k rows) a constant swizzle.
    constexpr int kRowsPerPass = kThreads / kChunks;
    constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
    const int row0 = tid / kChunks;
    const int chunk = tid % kChunks;
    const u16 *src = gmem + row0 * row_stride + chunk * 8;
    // Opaque to the compiler: otherwise it hoists every pass's 64-bit offset
    // out of the K/V loop and holds them in registers the accumulators need
    // (seen as ~100 bytes of spills at d=128, 128x64, 4 warps).
    const i64 pass_stride = opaque(kRowsPerPass * row_stride);
    const int first = swizzle<kDim>(row0, chunk);
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int row = row0 + i * kRowsPerPass;
      if (kRows % kRowsPerPass == 0 || row < kRows) {
        const bool valid = row < rows_valid;
        // Passes of 8k rows keep row%8, hence the swizzle: the offset is the
        // first pass's plus a constant.
        const int offset = kRowsPerPass % 8 == 0
                               ? first + i * kRowsPerPass * kDim
                               : swizzle<kDim>(row, chunk);
        cp_async_16(tile + 2 * offset, valid ? src + i * pass_stride : gmem, valid);
      }
    }
  } else {
    load_tile_rows<kThreads, kRows, kDim, kChunks>(tile, gmem, row_stride, rows_valid, tid);
  }
}

// Byte offsets, for j = 0..3, of chunk (2j + half) of a row whose row%8 is
// `row7`, within its 64-element swizzle atom. An operand whose rows are
// lane-constant mod 8 then needs only these four registers: chunk 2*ks + half
// lives at atom (ks/4) and offset [ks%4], both of the rest compile-time.
__device__ __forceinline__ void swizzled_pair_offsets(u32 (&off)[4], int row7, int half) {
#pragma unroll
  for (int j = 0; j < 4; ++j) off[j] = static_cast<u32>(((2 * j + half) ^ row7) * 16);
}

// Zeroes the chunks the MMAs read but no load writes (head dims that are not
// multiples of 16), so padding contributes exact zeros.
template <int kRows, int kDim, int kFirst, int kEnd>
__device__ __forceinline__ void zero_padding(u16 *tile, int tid) {
  if constexpr (kEnd > kFirst) {
    constexpr int kPer = kEnd - kFirst;
    for (int idx = tid; idx < kRows * kPer; idx += kThreads)
      st_shared_zero_16(smem_address(tile + swizzle<kDim>(idx / kPer, kFirst + idx % kPer)));
  }
}

}  // namespace fwd_sm80
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::fwd_sm80::kThreads)
    flashjit_fwd_sm80(const flashjit::FwdParams p) {
  using namespace flashjit;
  using namespace flashjit::fwd_sm80;
  const float kNegInf = __int_as_float(0xff800000);

  extern __shared__ __align__(128) unsigned char smem_raw[];
  u16 *const sQ = reinterpret_cast<u16 *>(smem_raw);
  u16 *const sKV = sQ + kSmemQ;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int group = lane / 4;   // mma fragment row (and row + 8)
  const int quad_lane = lane % 4;  // mma fragment column pair
  const int warp_row0 = warp * kWarpRows;

  // Heaviest Q tiles (most visible keys under a causal mask) start first;
  // with split-KV, x is (query block, split), splits fastest.
  const int splits = kSplitKv ? p.num_splits : 1;
  const int split = kSplitKv ? static_cast<int>(blockIdx.x) % splits : 0;
  const int m_blocks = static_cast<int>(gridDim.x) / splits;
  const int m_block = m_blocks - 1 - static_cast<int>(blockIdx.x) / splits;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.heads_per_kv;
  const int m0 = m_block * kBlockM;
  // This sequence's queries and keys; row i lines up with key i + offset
  // (bottom-right).
  const Sequence seq(p, batch);
  const int seqlen_q = seq.seqlen_q;
  const int seqlen_k = seq.seqlen_k;
  const i64 offset = seq.offset;

  // The K/V tiles any row of this tile sees (this split's share of them);
  // none past the sequence's queries (varlen: shorter than the longest).
  TileSpan key_tiles = m0 < seqlen_q
                           ? Score::key_tiles(p, seqlen_k, m0, kBlockM, offset, kBlockN)
                           : TileSpan{0, 0};
  if constexpr (kSplitKv) key_tiles = split_share(key_tiles, split, splits);
  const int n_block_begin = key_tiles.first;
  const int num_tiles = key_tiles.count;

  const u16 *const q_base = static_cast<const u16 *>(p.q) + seq.outer * p.q_batch_stride +
                            head * p.q_head_stride + (seq.q_row0 + m0) * p.q_row_stride;
  // Paged, the batch strides step between pages and the batch is a page.
  const i64 kv_outer = Sequence::kPaged ? 0 : seq.kv_outer;
  const u16 *const k_base = static_cast<const u16 *>(p.k) + kv_outer * p.k_batch_stride +
                            kv_head * p.k_head_stride + seq.k_row0 * p.k_row_stride;
  const u16 *const v_base = static_cast<const u16 *>(p.v) + kv_outer * p.v_batch_stride +
                            kv_head * p.v_head_stride + seq.k_row0 * p.v_row_stride;

  auto stage_k = [&](int stage) { return sKV + stage * kSmemStage; };
  auto stage_v = [&](int stage) { return sKV + stage * kSmemStage + kSmemK; };
  const u32 sQ_addr = smem_address(sQ);
  const u32 sKV_addr = smem_address(sKV);
  auto load_kv = [&](int tile, int stage) {
    const int n0 = (n_block_begin + tile) * kBlockN;
    // Per-thread offsets are recomputed from an opaque tid at each tile
    // rather than kept live across the loop, where S and O own the registers.
    const int tid = opaque(static_cast<int>(threadIdx.x));
    const u32 k_addr = sKV_addr + 2 * stage * kSmemStage;
    if constexpr (Sequence::kGathered) {
      // Each copy looks up its own row's page (the table row is in L1 after
      // the first); K and V share the lookup's page and row.
      auto source = [&](const u16 *base, i64 page_stride, i64 row_stride) {
        return [&, base, page_stride, row_stride](int r) -> const u16 * {
          const int n = n0 + r;
          if (n >= seqlen_k) return nullptr;
          const int page = p.page_table[seq.batch * p.page_table_stride + n / kPageSize];
          if (page < 0 || page >= p.num_pages) return nullptr;
          return base + page * page_stride + static_cast<i64>(n % kPageSize) * row_stride;
        };
      };
      gather_tile_rows<kThreads, kBlockN, kSmemDimQK, kChunksQK>(
          k_addr, source(k_base, p.k_batch_stride, p.k_row_stride), k_base, tid);
      gather_tile_rows<kThreads, kBlockN, kSmemDimV, kChunksV>(
          k_addr + 2 * kSmemK, source(v_base, p.v_batch_stride, p.v_row_stride), v_base, tid);
    } else if constexpr (Sequence::kPaged) {
      constexpr int kRows = Sequence::kBoxRows;
#pragma unroll
      for (int box = 0; box < Sequence::kBoxesPerTile; ++box) {
        const int page = seq.box_page(p, n0, box);
        const bool on_page = page < p.num_pages;
        // Off the pages: zero-filled rows, read from nowhere (the base is
        // only an address for the copies that are not made).
        const i64 row = on_page ? seq.box_row(n0, box) : 0;
        const int rows = on_page ? seqlen_k - (n0 + box * kRows) : 0;
        const u16 *const k_src = k_base + (on_page ? page * p.k_batch_stride : 0) +
                                 row * p.k_row_stride;
        const u16 *const v_src = v_base + (on_page ? page * p.v_batch_stride : 0) +
                                 row * p.v_row_stride;
        load_tile<kRows, kSmemDimQK, kChunksQK>(k_addr + 2 * box * kRows * kSmemDimQK, k_src,
                                                p.k_row_stride, rows, tid);
        load_tile<kRows, kSmemDimV, kChunksV>(k_addr + 2 * kSmemK + 2 * box * kRows * kSmemDimV,
                                              v_src, p.v_row_stride, rows, tid);
      }
    } else {
      load_tile<kBlockN, kSmemDimQK, kChunksQK>(k_addr, k_base + n0 * p.k_row_stride,
                                                p.k_row_stride, seqlen_k - n0, tid);
      load_tile<kBlockN, kSmemDimV, kChunksV>(k_addr + 2 * kSmemK, v_base + n0 * p.v_row_stride,
                                              p.v_row_stride, seqlen_k - n0, tid);
    }
  };

  // ---- prologue: padding, Q, and the first kStages-1 K/V tiles -------------
  zero_padding<kBlockM, kSmemDimQK, kChunksQK, kReadChunksQK>(sQ, tid);
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    zero_padding<kBlockN, kSmemDimQK, kChunksQK, kReadChunksQK>(stage_k(s), tid);
    zero_padding<kBlockN, kSmemDimV, kChunksV, kReadChunksV>(stage_v(s), tid);
  }
  load_tile<kBlockM, kSmemDimQK, kChunksQK>(sQ_addr, q_base, p.q_row_stride, seqlen_q - m0, tid);
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_tiles) load_kv(s, s);
    cp_async_commit();
  }

  float acc_o[kMTiles][kNTilesO][4];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int nt = 0; nt < kNTilesO; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc_o[mt][nt][i] = 0.f;
  // Per thread: rows `group` and `group + 8` of each m16 tile.
  OnlineSoftmax<kMTiles> stats;
  stats.reset();
  auto o_at = [&acc_o](int mt, int nt, int i) -> float & { return acc_o[mt][nt][i]; };
  const float scale_log2 = p.softmax_scale_log2;
  int stage = 0;
  for (int t = 0; t < num_tiles; ++t) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile t visible to all; everyone is done with tile t-1's stage
    {
      const int ahead = t + kStages - 1;
      int ahead_stage = stage + kStages - 1;
      if (ahead_stage >= kStages) ahead_stage -= kStages;
      if (ahead < num_tiles) load_kv(ahead, ahead_stage);
      cp_async_commit();
    }
    // ldmatrix addresses. Every operand's rows are lane-constant mod 8, so a
    // lane needs one row base and four swizzled chunk offsets per operand:
    //   Q (A of S):  row lane%16,                 chunk 2*ks + lane/16
    //   K (B of S):  row (lane/16)*8 + lane%8,    chunk 2*ks + (lane/8)%2
    //   V (B of O):  row lane%16 (+16*kk),        chunk 2*np + lane/16
    // Derived from an opaque lane at each tile: kept live across the loop
    // they would cost the accumulators registers (and spill).
    const int lane_t = opaque(lane);
    u32 qv_off[4], k_off[4];
    swizzled_pair_offsets(qv_off, lane_t % 8, lane_t / 16);
    swizzled_pair_offsets(k_off, lane_t % 8, (lane_t / 8) % 2);
    const u32 q_row_addr = sQ_addr + 2 * (warp_row0 + lane_t % 16) * kSmemDimQK;
    const u32 stage_addr = sKV_addr + 2 * stage * kSmemStage;
    const u32 k_addr = stage_addr + 2 * ((lane_t / 16) * 8 + lane_t % 8) * kSmemDimQK;
    const u32 v_addr = stage_addr + 2 * kSmemK + 2 * (lane_t % 16) * kSmemDimV;
    const int n0 = (n_block_begin + t) * kBlockN;

    // ---- S = Q K^T ----------------------------------------------------------
    float acc_s[kMTiles][kNTilesS][4];
    auto s_at = [&acc_s](int mt, int nt, int i) -> float & { return acc_s[mt][nt][i]; };
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc_s[mt][nt][i] = 0.f;
#pragma unroll
    for (int ks = 0; ks < kKStepsQK; ++ks) {
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
        ldmatrix_x4(a[mt], q_row_addr + qv_off[ks % 4] + (ks / 4) * 128 + mt * 16 * 2 * kSmemDimQK);
#pragma unroll
      for (int np = 0; np < kNTilesS / 2; ++np) {
        u32 b[4];
        ldmatrix_x4(b, k_addr + k_off[ks % 4] + (ks / 4) * 128 + np * 16 * 2 * kSmemDimQK);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Ops::mma(acc_s[mt][2 * np], a[mt], b[0], b[1]);
          Ops::mma(acc_s[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // ---- the score policy (common/score_policy.cuh) ---------------------------
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc_s[mt][nt][i] = Score::softcap(acc_s[mt][nt][i], p);

    // score_mod in the softmax's natural units (S times `unit`), mask_mod
    // hiding keys; only on queries and keys the sequence holds (the built-in
    // mask and the epilogue take care of the rest).
    if constexpr (Score::kModified) {
      const float unit = Score::natural_unit(p);
      const float inv_unit = 1.f / unit;
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int q = m0 + warp_row0 + mt * 16 + group + h * 8;
#pragma unroll
          for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int k = n0 + nt * 8 + quad_lane * 2 + c;
              float &s = acc_s[mt][nt][h * 2 + c];
              if (q < seqlen_q && k < seqlen_k) {
                if constexpr (Modifiers::kScore)
                  s = Score::modify(s * unit, batch, head, q, k, p.aux) * inv_unit;
                if constexpr (Modifiers::kMask)
                  if (!Score::shown(batch, head, q, k, p.aux)) s = kNegInf;
              }
            }
        }
    }

    // ---- mask: only tiles an edge cuts --------------------------------------
    if (Score::tile_is_cut(p, seqlen_k, m0, kBlockM, n0, kBlockN, offset)) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const i64 row = m0 + warp_row0 + mt * 16 + group + h * 8;
          int lo_local, hi_local;  // visible keys of this row, tile-local
          Score::visible_keys(p, seqlen_k, row, n0, kBlockN, offset, lo_local, hi_local);
#pragma unroll
          for (int nt = 0; nt < kNTilesS; ++nt)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
              const int col = nt * 8 + quad_lane * 2 + c;
              if (col > hi_local || col < lo_local) acc_s[mt][nt][h * 2 + c] = kNegInf;
            }
        }
    }

    // ---- online softmax (common/online_softmax.cuh) ---------------------------
    stats.update<kNTilesS>(s_at, scale_log2, [&](int r, float factor) {
      OnlineSoftmax<kMTiles>::rescale_row<kNTilesO>(o_at, r, factor);
    });

    // ---- O += P V -------------------------------------------------------------
#pragma unroll
    for (int kk = 0; kk < kKStepsPV; ++kk) {
      // The S accumulators of n-tiles 2kk and 2kk+1 are exactly the A
      // fragment of a k16 step: P never leaves registers.
      u32 a[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        a[mt][0] = Ops::pack(acc_s[mt][2 * kk][0], acc_s[mt][2 * kk][1]);
        a[mt][1] = Ops::pack(acc_s[mt][2 * kk][2], acc_s[mt][2 * kk][3]);
        a[mt][2] = Ops::pack(acc_s[mt][2 * kk + 1][0], acc_s[mt][2 * kk + 1][1]);
        a[mt][3] = Ops::pack(acc_s[mt][2 * kk + 1][2], acc_s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int np = 0; np < kNTilesO / 2; ++np) {
        u32 b[4];
        ldmatrix_x4_trans(b, v_addr + qv_off[np % 4] + (np / 4) * 128 + kk * 16 * 2 * kSmemDimV);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          Ops::mma(acc_o[mt][2 * np], a[mt], b[0], b[1]);
          Ops::mma(acc_o[mt][2 * np + 1], a[mt], b[2], b[3]);
        }
      }
    }
    if (++stage == kStages) stage = 0;
  }

  // ---- epilogue ---------------------------------------------------------------
  cp_async_wait<0>();
  if (kSplitKv && splits > 1) {
    // This split's partial: O / its own row sum and its LSE in fp32, to
    // [split][batch][head][row] (x kHeadDimV) of the workspace.
    const i64 slice = split * Sequence::lse_rows(p);
    const i64 head_rows = seq.lse_row(p, head, 0);
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const RowFinish finish =
            finish_partial(stats.row_max[2 * mt + h], stats.total(2 * mt + h), scale_log2);
        const float inv = finish.inv;
        const int row = m0 + warp_row0 + mt * 16 + group + h * 8;
        if (row >= seqlen_q) continue;
        float *const o_row = p.o_partial + (slice + head_rows + row) * kHeadDimV;
#pragma unroll
        for (int nt = 0; nt < kNTilesO; ++nt) {
          const int col = nt * 8 + quad_lane * 2;
          if (col < kHeadDimV)
            *reinterpret_cast<F32x2 *>(o_row + col) =
                F32x2{acc_o[mt][nt][h * 2] * inv, acc_o[mt][nt][h * 2 + 1] * inv};
        }
        if (quad_lane == 0) p.lse_partial[slice + head_rows + row] = finish.lse;
      }
    return;
  }
  __syncthreads();  // every warp is done with Q/K/V: the space becomes sO
  u16 *const sO = sQ;
  float *const lse_base = p.lse ? p.lse + seq.lse_row(p, head, 0) : nullptr;
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // The row's output factor and LSE, a learned sink joining its softmax.
      const RowFinish finish =
          finish_row<Modifiers::kSinks>(stats.row_max[2 * mt + h], stats.total(2 * mt + h),
                                        scale_log2, Modifiers::kSinks ? p.sinks[head] : 0.f);
      const float inv = finish.inv;
      const int row = warp_row0 + mt * 16 + group + h * 8;
#pragma unroll
      for (int nt = 0; nt < kNTilesO; ++nt) {
        const u32 packed = Ops::pack(acc_o[mt][nt][h * 2] * inv, acc_o[mt][nt][h * 2 + 1] * inv);
        const int col = nt * 8 + quad_lane * 2;
        *reinterpret_cast<u32 *>(sO + swizzle<kSmemDimV>(row, col / 8) + col % 8) = packed;
      }
      if (lse_base && quad_lane == 0 && m0 + row < seqlen_q) lse_base[m0 + row] = finish.lse;
    }
  __syncthreads();

  u16 *const o_base = static_cast<u16 *>(p.o) + seq.outer * p.o_batch_stride +
                      head * p.o_head_stride + (seq.q_row0 + m0) * p.o_row_stride;
  constexpr int kTotal = kBlockM * kChunksV;
#pragma unroll
  for (int i = 0; i < (kTotal + kThreads - 1) / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    if (kTotal % kThreads == 0 || idx < kTotal) {
      const int row = idx / kChunksV;
      const int chunk = idx % kChunksV;
      if (m0 + row < seqlen_q)
        *reinterpret_cast<U32x4 *>(o_base + row * p.o_row_stride + chunk * 8) =
            *reinterpret_cast<const U32x4 *>(sO + swizzle<kSmemDimV>(row, chunk));
    }
  }
}
