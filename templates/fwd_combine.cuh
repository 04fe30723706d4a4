// Split-KV combine: merges the partial results of the num_splits CTAs that
// each attended to a share of a row's keys (fwd_sm90.cuh / fwd_sm80.cuh with
// kSplitKv) into O and the log-sum-exp, exactly:
//   lse = log(sum_i exp(lse_i)),   O = sum_i exp(lse_i - lse) * O_i,
// where O_i is split i's output normalised by its own row sum and lse_i its
// log-sum-exp (-inf for a split that saw no key). A row no split saw writes
// O = 0 and LSE = +inf, as the unsplit kernels do.
//
// Layout of the workspace (fp32, contiguous): o_partial[split][LSE row]
// [kHeadDimV], then lse_partial[split][LSE row], an LSE row being
// [batch][head][query], or [head][token] of a packed batch (kVarlen).
//
// One warp per row: each lane holds one split's LSE (a loop beyond 32
// splits) for the max and the sum, and accumulates 4 columns per 128 of the
// row with 16-byte loads; the first kPreload splits' rows load together with
// the LSEs, so a decode step's combine is one round trip to memory. The
// row's splits are summed in order, so the result is deterministic. The arithmetic is split_merge.cuh's, which the host
// tests hold against float64. The traffic is num_splits * kHeadDimV * 4 bytes per row
// against the main kernel's whole key range, so a simple kernel suffices.
#pragma once

#include "common/fwd_params.cuh"
#include "common/modifiers.cuh"
#include "common/ptx.cuh"
#include "common/split_merge.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace fwd_combine {

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 32 * kWarpsPerBlock;
// Splits whose partial rows load together with the LSEs (16 float4 per
// 128 columns: 64 registers at head dim 128).
constexpr int kPreload = cfg::kHeadDimV > 256 ? 4 : cfg::kHeadDimV > 128 ? 8 : 16;
static_assert(kPreload <= 32, "the preloaded splits' weights are the first 32 lanes'");
static_assert(cfg::kHeadDimV % 4 == 0, "head_dim_v: whole float4 column groups");

}  // namespace fwd_combine
}  // namespace flashjit

extern "C" __global__ void __launch_bounds__(flashjit::fwd_combine::kThreads)
    flashjit_fwd_combine(const flashjit::FwdParams p) {
  using namespace flashjit;
  using namespace flashjit::fwd_combine;
  using Ops = ElementOps<cfg::OutElement>;
  constexpr int kDim = cfg::kHeadDimV;
  const float kNegInf = __int_as_float(0xff800000);

  // Launched as a programmatic dependent of the main kernel: the launch
  // overlapped its tail; its partials are complete and visible past here.
  grid_dependency_wait();
  // The next call's forward may be scheduled: it waits for this grid.
  grid_dependents_launch();
  const int lane = threadIdx.x % 32;
  // Rows: [batch][head][query], or [head][token] of a packed batch (kVarlen).
  const i64 rows = cfg::kVarlen ? static_cast<i64>(p.heads_q) * p.total_q
                                : static_cast<i64>(p.batch) * p.heads_q * p.seqlen_q;
  const i64 row = static_cast<i64>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= rows) return;
  const int splits = p.num_splits;
  const float *lse_split = p.lse_partial + row;
  const float *const o_split = p.o_partial + row * kDim;
  constexpr int kColumnGroups = (kDim + 127) / 128;  // 4 columns per lane per 128

  // One round trip to memory for the common case: lane i's LSE (split i;
  // splits past 32 are read in a loop below) and the first kPreload splits'
  // partial rows are loaded together, before any arithmetic needs them (an
  // empty split's row is zeros, so the loads are unconditional but for the
  // split count). The rest, if any, in unrolled batches of independent loads.
  float lse_mine = lane < splits ? lse_split[lane * rows] : kNegInf;
  F32x4 preloaded[kPreload][kColumnGroups];
#pragma unroll
  for (int j = 0; j < kPreload; ++j)
#pragma unroll
    for (int g = 0; g < kColumnGroups; ++g) {
      const int c = g * 128 + lane * 4;
      preloaded[j][g] = F32x4{0.f, 0.f, 0.f, 0.f};
      if (j < splits && (kDim % 128 == 0 || c < kDim))
        preloaded[j][g] = *reinterpret_cast<const F32x4 *>(o_split + j * rows * kDim + c);
    }

  // Max and sum of exponentials over the splits (split_merge.cuh).
  float m = lse_mine;
  for (int s = lane + 32; s < splits; s += 32) m = fmaxf(m, lse_split[s * rows]);
#pragma unroll
  for (int d = 16; d > 0; d /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, d));
  float sum = split_merge::sum_term(lse_mine, m);
  for (int s = lane + 32; s < splits; s += 32) sum += split_merge::sum_term(lse_split[s * rows], m);
#pragma unroll
  for (int d = 16; d > 0; d /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);

  u16 *o_row;
  int head;
  if constexpr (cfg::kVarlen) {
    // A token no sequence owns (past cu_seqlens_q[batch]) gets whatever its
    // unwritten partials hold: its O row is unspecified, as FlashAttention's.
    const i64 token = row % p.total_q;
    head = static_cast<int>(row / p.total_q);
    o_row = static_cast<u16 *>(p.o) + token * p.o_row_stride + head * p.o_head_stride;
  } else {
    const int q = static_cast<int>(row % p.seqlen_q);
    const i64 bh = row / p.seqlen_q;
    head = static_cast<int>(bh % p.heads_q);
    const int batch = static_cast<int>(bh / p.heads_q);
    o_row = static_cast<u16 *>(p.o) + batch * p.o_batch_stride +
            static_cast<i64>(q) * p.o_row_stride + head * p.o_head_stride;
  }
  // A learned sink counts once, here: the splits' partials leave it out.
  if constexpr (cfg::Modifiers::kSinks) split_merge::add_sink(m, sum, p.sinks[head]);
  const float lse = split_merge::merged_lse(m, sum);
  float acc[kColumnGroups][4] = {};
  auto accumulate = [&](float w, const F32x4 &v, int g) {
    acc[g][0] += w * v.x;
    acc[g][1] += w * v.y;
    acc[g][2] += w * v.z;
    acc[g][3] += w * v.w;
  };
  // Split j's weight comes from lane j % 32 (its LSE read again past 32).
  // Summed in split order, so the result is deterministic.
  const float w_first = lane < splits ? split_merge::weight(lse_mine, lse) : 0.f;
#pragma unroll
  for (int j = 0; j < kPreload; ++j) {
    const float w = __shfl_sync(0xffffffffu, w_first, j);
#pragma unroll
    for (int g = 0; g < kColumnGroups; ++g) accumulate(w, preloaded[j][g], g);
  }
  // The splits past kPreload, 32 weights at a time (lane i: split 32b + i),
  // in unrolled runs of independent loads.
  for (int b = 0; b * 32 < splits; ++b) {
    const int first = b == 0 ? kPreload : b * 32;
    const int last = splits < b * 32 + 32 ? splits : b * 32 + 32;
    if (first >= last) continue;
    const int s_mine = b * 32 + lane;
    const float w_mine =
        b == 0 ? w_first
               : s_mine < splits ? split_merge::weight(lse_split[s_mine * rows], lse) : 0.f;
#pragma unroll 8
    for (int j = first; j < last; ++j) {
      const float w = __shfl_sync(0xffffffffu, w_mine, j - b * 32);
      const float *const o_s = o_split + j * rows * kDim;
#pragma unroll
      for (int g = 0; g < kColumnGroups; ++g) {
        const int c = g * 128 + lane * 4;
        if (kDim % 128 == 0 || c < kDim)
          accumulate(w, *reinterpret_cast<const F32x4 *>(o_s + c), g);
      }
    }
  }
#pragma unroll
  for (int g = 0; g < kColumnGroups; ++g) {
    const int c = g * 128 + lane * 4;
    if (kDim % 128 == 0 || c < kDim)
      *reinterpret_cast<U32x2 *>(o_row + c) =
          U32x2{Ops::pack(acc[g][0], acc[g][1]), Ops::pack(acc[g][2], acc[g][3])};
  }
  if (p.lse && lane == 0) p.lse[row] = lse;
}
