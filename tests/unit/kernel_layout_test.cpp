// The layout headers that the kernels and their host twins both compile
// (templates/common/*_layout.cuh): tiles, offsets and shared memory of known
// configs, worked out by hand from the kernels' buffers. The static_asserts
// evaluate them as the kernels do (constant expressions), the tests as the
// traits do (run-time values).
#include <gtest/gtest.h>

#include "templates/common/bwd_sm80_layout.cuh"
#include "templates/common/bwd_sm90_layout.cuh"
#include "templates/common/fwd_sm80_layout.cuh"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {
namespace {

// ---- sm80 forward --------------------------------------------------------------------

// d=128, 128x64, 4 warps, 2 stages: Q 128x128 + 2 x (K 64x128 + V 64x128),
// 2 bytes each.
constexpr FwdSm80Layout kFwdSm80{128, 128, 128, 64, 4, 2};
static_assert(kFwdSm80.smem_bytes() == (128 * 128 + 2 * (64 * 128 + 64 * 128)) * 2);
static_assert(kFwdSm80.stage_elements() == 64 * 128 + 64 * 128);

TEST(FwdSm80Layout, TilesAndSharedMemory) {
  const FwdSm80Layout l{128, 128, 128, 64, 4, 2};
  EXPECT_EQ(l.threads(), 128);
  EXPECT_EQ(l.m_tiles(), 2);  // 32 rows a warp
  EXPECT_EQ(l.n_tiles_s(), 8);
  EXPECT_EQ(l.n_tiles_o(), 16);
  EXPECT_EQ(l.q_elements(), 128 * 128);
  EXPECT_EQ(l.smem_bytes(), (128 * 128 + 2 * (64 * 128 + 64 * 128)) * 2);
  // O (2 m16 tiles x 16 n8 tiles) and S (2 x 8), 4 fp32 each.
  EXPECT_EQ(l.accumulator_registers(), 2 * 16 * 4 + 2 * 8 * 4);
  // d=72 / dv=40 pad the shared rows to whole swizzle atoms (128 and 64
  // elements) and the MMAs' columns to 16 (80 and 48).
  const FwdSm80Layout padded{72, 40, 64, 32, 4, 3};
  EXPECT_EQ(padded.smem_dim_qk(), 128);
  EXPECT_EQ(padded.smem_dim_v(), 64);
  EXPECT_EQ(padded.read_chunks_qk(), 10);
  EXPECT_EQ(padded.smem_bytes(), (64 * 128 + 3 * (32 * 128 + 32 * 64)) * 2);
  EXPECT_EQ(padded.accumulator_registers(), 1 * 6 * 4 + 1 * 4 * 4);
}

// ---- sm80 backward -------------------------------------------------------------------

// d=128, 64x128, 8 warps, 2 stages: K, V 128x128; Q, dO 2 x 64x128; P^T and
// dS^T 128x64; LSE and D, 2 x 64 fp32 each.
constexpr BwdSm80Layout kBwdSm80{128, 128, 64, 128, 8, 2};
static_assert(kBwdSm80.smem_bytes() == (2 * 128 * 128 + 4 * 64 * 128 + 2 * 128 * 64 + 512) * 2);
static_assert(kBwdSm80.dq_smem_bytes() == (64 * 256 + 2 * 64 * 256) * 2);

TEST(BwdSm80Layout, WarpTilingsAndSharedMemory) {
  const BwdSm80Layout l{128, 128, 64, 128, 8, 2};
  EXPECT_EQ(l.warps_s_m(), 4);
  EXPECT_EQ(l.warps_s_n(), 2);
  EXPECT_EQ(l.s_m_tiles(), 2);
  EXPECT_EQ(l.s_n_tiles(), 4);
  EXPECT_EQ(l.warps_kv_m(), 8);
  EXPECT_EQ(l.warps_kv_n(), 1);
  EXPECT_EQ(l.kv_n_tiles_qk(), 16);
  EXPECT_EQ(l.warps_q_m(), 4);
  EXPECT_EQ(l.warps_q_n(), 2);
  EXPECT_EQ(l.q_n_tiles(), 8);
  EXPECT_EQ(l.offset_q(), 2 * 128 * 128);
  EXPECT_EQ(l.offset_p(), 2 * 128 * 128 + 4 * 64 * 128);
  EXPECT_EQ(l.offset_stats(), 2 * 128 * 128 + 4 * 64 * 128 + 2 * 128 * 64);
  EXPECT_EQ(l.smem_bytes(), (2 * 128 * 128 + 4 * 64 * 128 + 2 * 128 * 64 + 512) * 2);
  // dK and dV: 16 rows x 256 columns a warp; S^T and dP^T 32 x 32.
  EXPECT_EQ(l.accumulator_registers(), 128 + 64);
  // The dQ kernel: 4 warps; Q and dO 64x128, then 2 stages of K and V
  // 64x128.
  EXPECT_EQ(l.dq_threads(), 128);
  EXPECT_EQ(l.dq_offset_kv(), 2 * 64 * 128);
  EXPECT_EQ(l.dq_smem_bytes(), (2 * 64 * 128 + 2 * 2 * 64 * 128) * 2);
  // d=72: MMAs over 96 columns, shared rows of 128; one stage of 64x64 at 4
  // warps (P^T's rows whole swizzle atoms of 64 queries).
  const BwdSm80Layout odd{72, 72, 64, 64, 4, 1};
  EXPECT_EQ(odd.dim_qk(), 96);
  EXPECT_EQ(odd.smem_dim_qk(), 128);
  EXPECT_EQ(odd.smem_bytes(), (2 * 64 * 128 + 2 * 64 * 128 + 2 * 64 * 64 + 2 * 64 * 2) * 2);
  EXPECT_EQ(odd.dq_chunks(), 1);
  EXPECT_EQ(odd.dq_chunk_columns(), 96);
}

TEST(BwdSm80Layout, PastHeadDim256) {
  // d=512 at 64 x 32, 8 warps, one stage: S^T's 32 keys over 2 x 4 warps;
  // dK and dV 16 keys x 128 columns a warp (128 registers); dQ in 8 chunks
  // of 64 columns; K, V 32 x 512, Q, dO 64 x 512, P^T and dS^T 32 x 64.
  const BwdSm80Layout l{512, 512, 64, 32, 8, 1};
  EXPECT_EQ(l.warps_s_m(), 2);
  EXPECT_EQ(l.warps_s_n(), 4);
  EXPECT_EQ(l.s_m_tiles(), 1);
  EXPECT_EQ(l.s_n_tiles(), 2);
  EXPECT_EQ(l.warps_kv_m(), 2);
  EXPECT_EQ(l.warps_kv_n(), 4);
  EXPECT_EQ(l.kv_n_tiles_qk(), 16);
  EXPECT_EQ(l.dq_chunks(), 8);
  EXPECT_EQ(l.dq_chunk_columns(), 64);
  EXPECT_EQ(l.q_n_tiles(), 4);
  EXPECT_EQ(l.accumulator_registers(), 128 + 16);
  EXPECT_EQ(l.smem_bytes(), (2 * 32 * 512 + 2 * 64 * 512 + 2 * 32 * 64 + 2 * 64 * 2) * 2);
  // 328 (not a multiple of 64): the MMAs over 384 columns, 6 chunks.
  const BwdSm80Layout odd{328, 328, 64, 32, 8, 1};
  EXPECT_EQ(odd.dim_qk(), 384);
  EXPECT_EQ(odd.dq_chunks(), 6);
  EXPECT_EQ(odd.kv_n_tiles_qk() % 2, 0);
  // 256 and below keep their S^T split (2 warps across the queries at 8
  // warps; 32 keys over 8 warps stays refused there).
  EXPECT_EQ((BwdSm80Layout{128, 128, 64, 64, 8, 2}.warps_s_n()), 2);
  EXPECT_EQ((BwdSm80Layout{64, 64, 128, 128, 8, 2}.warps_s_n()), 2);
  EXPECT_EQ((BwdSm80Layout{64, 64, 64, 64, 4, 2}.warps_s_n()), 1);
  EXPECT_EQ((BwdSm80Layout{128, 128, 64, 32, 8, 2}.warps_s_n()), 2);
}

// ---- sm90 backward -------------------------------------------------------------------

// d=128, 64x128, 2 stages: K, V 128x128; Q, dO 2 stages of 64x128; dS^T 2 x
// 128x64; LSE and D: 2 warpgroups x 2 buffers x 2 x 64 fp32; each
// warpgroup's staged dQ part, 64 rows x 64 columns fp32; 10 mbarriers and
// the two work item slots; 1024 bytes of alignment slack.
constexpr BwdSm90Layout kBwdSm90{128, 128, 64, 128, 2};
static_assert(kBwdSm90.dq_staged());
static_assert(kBwdSm90.smem_bytes() == 2 * 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * 128 * 64 * 2 +
                                           2 * 2 * 2 * 64 * 4 + 2 * 64 * 64 * 4 + 88 + 1024);
static_assert(kBwdSm90.smem_bytes() <= kSm90SmemBudget);

TEST(BwdSm90Layout, OffsetsOfTheTiles) {
  const BwdSm90Layout l{128, 128, 64, 128, 2};
  EXPECT_FALSE(l.splits_head_dim());
  EXPECT_EQ(l.atom_columns(), 64);
  EXPECT_EQ(l.k_tile_bytes(), 128 * 128 * 2);
  EXPECT_EQ(l.offset_q(), 2 * 128 * 128 * 2);
  EXPECT_EQ(l.offset_ds(), 2 * 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2);
  EXPECT_EQ(l.offset_dq(),
            2 * 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4);
  EXPECT_EQ(l.dq_stage_bytes(), 64 * 64 * 4);
  EXPECT_EQ(l.offset_barriers(), l.offset_dq() + 2 * 64 * 64 * 4);
  EXPECT_EQ(l.smem_bytes(), l.offset_barriers() + 88 + 1024);
}

TEST(BwdSm90Layout, SharedMemoryOfKnownConfigs) {
  const struct {
    int qk, v, block_m, block_n, stages;
    bool split, staged;
    int smem;
  } configs[] = {
      // d=128: three stages leave no room for the staged parts (dQ by atomics).
      {128, 128, 64, 128, 2, false, true,
       2 * 128 * 128 * 2 + 2 * 2 * 64 * 128 * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4 +
           2 * 64 * 64 * 4 + 88 + 1024},
      {128, 128, 64, 128, 3, false, false,
       2 * 128 * 128 * 2 + 3 * 2 * 64 * 128 * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4 + 104 +
           1024},
      // d=256: K, V 64x256; Q, dO 2 stages of 64x256; dS^T and P^T 2 x 2 x
      // 64x64; LSE and D of each warpgroup's 32 queries; no room for dQ's
      // staged parts (64 x 128 fp32 each).
      {256, 256, 64, 64, 2, true, false,
       2 * 64 * 256 * 2 + 2 * 2 * 64 * 256 * 2 + 2 * 2 * 64 * 64 * 2 + 2 * 2 * 2 * 32 * 4 + 88 +
           1024},
      // 192/128 (Q/K tiled as 192, V/dO as 128), split: dQ staged (each
      // warpgroup's 64 x 96 fp32).
      {192, 128, 64, 64, 2, true, true,
       64 * (192 + 128) * 2 + 2 * 64 * (192 + 128) * 2 + 2 * 2 * 64 * 64 * 2 + 2 * 2 * 2 * 32 * 4 +
           2 * 64 * 96 * 4 + 88 + 1024},
      // 192/128 with 128 keys a CTA (each warpgroup its own 64): one stage,
      // two dS^T buffers (no P^T), statistics of 64 queries a warpgroup, dQ
      // staged by column halves; two stages leave no room for it.
      {192, 128, 64, 128, 1, false, true,
       128 * (192 + 128) * 2 + 64 * (192 + 128) * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4 +
           2 * 64 * 96 * 4 + 72 + 1024},
      {192, 128, 64, 128, 2, false, false,
       128 * (192 + 128) * 2 + 2 * 64 * (192 + 128) * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4 +
           88 + 1024},
      // 160 (tiled as 192): the split as at 256 over 192 columns.
      {160, 160, 64, 64, 2, true, true,
       2 * 64 * 192 * 2 + 2 * 2 * 64 * 192 * 2 + 2 * 2 * 64 * 64 * 2 + 2 * 2 * 2 * 32 * 4 +
           2 * 64 * 96 * 4 + 88 + 1024},
      // d=96: dQ whole per warpgroup over its own keys.
      {96, 96, 64, 128, 1, false, true,
       2 * 128 * 96 * 2 + 2 * 64 * 96 * 2 + 2 * 128 * 64 * 2 + 2 * 2 * 2 * 64 * 4 +
           2 * 64 * 96 * 4 + 72 + 1024},
      // d=32, 128-query tiles: dQ whole per warpgroup (split by rows).
      {32, 32, 128, 128, 1, false, true,
       2 * 128 * 32 * 2 + 128 * 64 * 2 + 2 * 128 * 128 * 2 + 2 * 2 * 2 * 128 * 4 + 2 * 64 * 32 * 4 +
           72 + 1024},
  };
  for (const auto &c : configs) {
    SCOPED_TRACE(::testing::Message()
                 << c.qk << "/" << c.v << " " << c.block_m << "x" << c.block_n << " s" << c.stages);
    const BwdSm90Layout l{c.qk, c.v, c.block_m, c.block_n, c.stages};
    EXPECT_EQ(l.splits_head_dim(), c.split);
    EXPECT_EQ(l.dq_staged(), c.staged);
    EXPECT_EQ(l.smem_bytes(), c.smem);
    EXPECT_LE(l.smem_bytes(), kSm90SmemBudget);
  }
}

// ---- sm90 forward --------------------------------------------------------------------

// d=128, 128x128, 2 stages: two Q buffers of 32 KiB, 2 x (K and V 32 KiB),
// 12 mbarriers and 2 tile slots of 8 bytes, 1024 of alignment slack.
constexpr FwdSm90Layout kFwdSm90{128, 128, 128, 2, 1};
static_assert(kFwdSm90.q_stages() == 2);
static_assert(kFwdSm90.smem_bytes() == 2 * 32768 + 4 * 32768 + 8 * (2 * 2 + 4 * 2) + 8 * 2 + 1024);

}  // namespace
}  // namespace flashjit
