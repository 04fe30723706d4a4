// The backward's row-wise kernels, shared by both backward families:
//   flashjit_bwd_preprocess  D = rowsum(dO * O) in fp32, and the fp32 dQ
//                            accumulator (and, deterministic, the dQ
//                            semaphores) zeroed;
//   flashjit_bwd_convert_dq  dQ = softmax_scale * accumulator, to 16 bits;
//   flashjit_bwd_sink_grad   learned sinks' gradient from the LSE and D (one
//                            CTA per head, below).
// Both are bound by memory bandwidth and run once per backward whatever the
// sequence length, so at short sequences they are a visible part of it: a
// row is spread over a group of lanes, 16 bytes each, so a warp's accesses
// cover whole rows (coalesced) rather than one 16-byte piece of 32 rows.
// Grid (ceil(seqlen_q / 128), heads_q, batch), 128 threads: 128 rows per CTA,
// 128 / kLanesPerRow of them at a time. A packed varlen batch (kVarlen) takes
// each sequence's rows (common/sequence.cuh); blocks past a shorter
// sequence's end do nothing.
#pragma once

#include "common/bwd_params.cuh"
#include "common/sequence.cuh"
#include "common/types.cuh"

namespace flashjit {
namespace bwd_rowwise {

constexpr int kThreads = 128;
constexpr int kRowsPerCta = 128;

// Lanes per row: one per 8 elements, rounded up to a power of two so that a
// row's lanes are an aligned group of one warp; past head dim 256 a whole
// warp, each lane taking pieces_per_lane() pieces of 8 elements.
constexpr int lanes_per_row(int head_dim) {
  int lanes = 1;
  while (lanes * 8 < head_dim && lanes < 32) lanes *= 2;
  return lanes;
}
constexpr int pieces_per_lane(int head_dim) {
  return (head_dim / 8 + lanes_per_row(head_dim) - 1) / lanes_per_row(head_dim);
}

using Sequence = SequenceInfo<cfg::kVarlen, cfg::kSeqUsedK, 0, 64>;

// 16 bytes of O or dO, read once here: streamed (evict first).
__device__ __forceinline__ U32x4 load_streaming(const u16 *src) {
  U32x4 v;
  asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(src));
  return v;
}

// The CTA's block of query rows: head, the batch index of the tensors
// (outer: 0 for a packed batch), the first row within the tensors
// (tensor_row) and the row count, and the first row's index among D's and
// the accumulator's rows (common/sequence.cuh, workspace_row).
struct RowBlock {
  int head, outer, rows;
  i64 tensor_row, first;
};
__device__ __forceinline__ RowBlock row_block(const BwdParams &p) {
  const Sequence seq(p, blockIdx.z);
  RowBlock b;
  b.head = blockIdx.y;
  b.outer = seq.outer;
  const int row_begin = blockIdx.x * kRowsPerCta;
  b.rows = min(kRowsPerCta, seq.seqlen_q - row_begin);
  b.tensor_row = seq.q_row0 + row_begin;
  b.first = seq.workspace_row(p, b.head, row_begin);
  return b;
}

}  // namespace bwd_rowwise
}  // namespace flashjit

// D = rowsum(dO * O) per query row, and the rows' dQ accumulator zeroed.
extern "C" __global__ void __launch_bounds__(flashjit::bwd_rowwise::kThreads)
    flashjit_bwd_preprocess(const flashjit::BwdParams p) {
  using namespace flashjit;
  using namespace flashjit::bwd_rowwise;
  using Ops = ElementOps<cfg::Element>;
  constexpr int kLanes = lanes_per_row(cfg::kHeadDimV);
  constexpr int kPieces = pieces_per_lane(cfg::kHeadDimV);  // a lane's pieces of a row
  constexpr int kRowsPerPass = kThreads / kLanes;
  constexpr int kChunks = cfg::kHeadDimV / 8;  // 16-byte pieces of a row
  static_assert(kLanes <= 32, "a row's lanes within one warp");
  const auto [head, outer, rows, tensor_row, first] = row_block(p);
  // The sm90 kernel's work counter (BwdParams::work_counter), which runs after.
  if ((blockIdx.x | blockIdx.y | blockIdx.z | threadIdx.x) == 0) *p.work_counter = 0;
  const int chunk = threadIdx.x % kLanes;
  // kBatch rows a thread at a time, every load issued before any is used or
  // D stored (a store between loads may alias them, which kept one row's
  // two loads in flight at a time; H200, d=128 16k tokens: 75.4 -> 73.8 us,
  // against cuDNN's 70.4 for the same work).
  constexpr int kBatch = kPieces > 1 ? 2 : 4;
  for (int r0 = threadIdx.x / kLanes; r0 < kRowsPerCta; r0 += kBatch * kRowsPerPass) {
    U32x4 a[kBatch][kPieces], b[kBatch][kPieces];
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const int r = r0 + u * kRowsPerPass, piece = chunk + k * kLanes;
        a[u][k] = b[u][k] = U32x4{0, 0, 0, 0};
        if (r < rows && piece < kChunks) {
          const i64 row = tensor_row + r;
          a[u][k] = load_streaming(static_cast<const u16 *>(p.o) + outer * p.o_batch_stride +
                                   head * p.o_head_stride + row * p.o_row_stride + piece * 8);
          b[u][k] = load_streaming(static_cast<const u16 *>(p.dout) +
                                   outer * p.do_batch_stride + head * p.do_head_stride +
                                   row * p.do_row_stride + piece * 8);
        }
      }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int r = r0 + u * kRowsPerPass;
      float sum = 0.f;
#pragma unroll
      for (int k = 0; k < kPieces; ++k) {
        const u32 av[4] = {a[u][k].x, a[u][k].y, a[u][k].z, a[u][k].w};
        const u32 bv[4] = {b[u][k].x, b[u][k].y, b[u][k].z, b[u][k].w};
#pragma unroll
        for (int j = 0; j < 4; ++j)
          sum += Ops::to_float(static_cast<u16>(av[j] & 0xffff)) *
                     Ops::to_float(static_cast<u16>(bv[j] & 0xffff)) +
                 Ops::to_float(static_cast<u16>(av[j] >> 16)) *
                     Ops::to_float(static_cast<u16>(bv[j] >> 16));
      }
      // Every lane takes part (the loop's trip count is the same for all).
#pragma unroll
      for (int offset = kLanes / 2; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
      if (chunk == 0 && r < rows) {
        p.dsum[first + r] = sum;
        if constexpr (cfg::kDeterministic) p.dq_semaphore[first + r] = 0;
      }
    }
  }
  // The CTA's rows of the accumulator are one contiguous range.
  if (rows > 0) {
    U32x4 *const accum = reinterpret_cast<U32x4 *>(p.dq_accum + first * cfg::kHeadDimQK);
    const int pieces = rows * cfg::kHeadDimQK / 4;
    for (int i = threadIdx.x; i < pieces; i += kThreads) accum[i] = U32x4{0, 0, 0, 0};
  }
}

// dQ = softmax_scale * accumulator, as 16 bits, into the strided dQ.
extern "C" __global__ void __launch_bounds__(flashjit::bwd_rowwise::kThreads)
    flashjit_bwd_convert_dq(const flashjit::BwdParams p) {
  using namespace flashjit;
  using namespace flashjit::bwd_rowwise;
  using Ops = ElementOps<cfg::Element>;
  constexpr int kLanes = lanes_per_row(cfg::kHeadDimQK);
  constexpr int kPieces = pieces_per_lane(cfg::kHeadDimQK);
  constexpr int kRowsPerPass = kThreads / kLanes;
  constexpr int kChunks = cfg::kHeadDimQK / 8;
  const auto [head, outer, rows, tensor_row, first] = row_block(p);
  const int chunk = threadIdx.x % kLanes;
  if (chunk >= kChunks) return;
#pragma unroll 4
  for (int r = threadIdx.x / kLanes; r < rows; r += kRowsPerPass) {
#pragma unroll
    for (int k = 0; k < kPieces; ++k) {
      const int piece = chunk + k * kLanes;
      if (kPieces > 1 && piece >= kChunks) break;
      const float4 *const accum = reinterpret_cast<const float4 *>(
          p.dq_accum + (first + r) * cfg::kHeadDimQK + piece * 8);
      const float4 lo = accum[0], hi = accum[1];
      const float s = p.softmax_scale;
      u16 *const dq = static_cast<u16 *>(p.dq) + outer * p.dq_batch_stride +
                      head * p.dq_head_stride + (tensor_row + r) * p.dq_row_stride + piece * 8;
      *reinterpret_cast<U32x4 *>(dq) =
          U32x4{Ops::pack(lo.x * s, lo.y * s), Ops::pack(lo.z * s, lo.w * s),
                Ops::pack(hi.x * s, hi.y * s), Ops::pack(hi.z * s, hi.w * s)};
    }
  }
}

// d sink_h = -sum over the head's rows of exp(sink_h - LSE) * D: the sink's
// probability times rowsum(dO * O) (a key with no value has dP = 0, so its
// dS is -P * D). Learned sinks only (Modifiers::kSinks), after the
// preprocess has written D. Grid (heads_q), kThreads threads: each CTA sums
// its head's rows of every sequence in a fixed order and writes dsinks[h],
// so the result is the same bits run to run and needs no zeroed output.
// Its traffic is 8 bytes per row and head.
extern "C" __global__ void __launch_bounds__(flashjit::bwd_rowwise::kThreads)
    flashjit_bwd_sink_grad(const flashjit::BwdParams p) {
  using namespace flashjit;
  using namespace flashjit::bwd_rowwise;
  __shared__ float warp_sums[kThreads / 32];
  const int head = blockIdx.x;
  const float sink = p.sinks[head];
  float sum = 0.f;
  for (int b = 0; b < p.batch; ++b) {
    const Sequence seq(p, b);
    for (int r = threadIdx.x; r < seq.seqlen_q; r += kThreads) {
      const float lse = p.lse[seq.lse_row(p, head, r)];
      // exp through exp2, as the kernels compute it (a row LSE +inf: 0).
      sum += exp2f((sink - lse) * 1.4426950408889634f) * p.dsum[seq.workspace_row(p, head, r)];
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    p.dsinks[head] = -total;
  }
}
