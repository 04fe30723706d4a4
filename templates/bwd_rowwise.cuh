// The backward's row-wise kernels, shared by both backward families:
//   flashjit_bwd_preprocess  D = rowsum(dO * O) in fp32, and the fp32 dQ
//                            accumulator zeroed;
//   flashjit_bwd_convert_dq  dQ = softmax_scale * accumulator, to 16 bits.
// One thread per query row: both are bound by memory bandwidth, a few
// microseconds next to the main kernel.
#pragma once

#include "common/bwd_params.cuh"
#include "common/types.cuh"

// D = rowsum(dO * O) per query row, and the row's dQ accumulator zeroed.
// Grid (ceil(seqlen_q / 128), heads_q, batch), 128 threads: one row each.
extern "C" __global__ void __launch_bounds__(128)
    flashjit_bwd_preprocess(const flashjit::BwdParams p) {
  using namespace flashjit;
  using Ops = ElementOps<cfg::Element>;
  const int row = blockIdx.x * 128 + threadIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const u16 *o = static_cast<const u16 *>(p.o) + batch * p.o_batch_stride +
                 head * p.o_head_stride + row * p.o_row_stride;
  const u16 *dout = static_cast<const u16 *>(p.dout) + batch * p.do_batch_stride +
                    head * p.do_head_stride + row * p.do_row_stride;
  float sum = 0.f;
#pragma unroll 4
  for (int c = 0; c < cfg::kHeadDimV / 8; ++c) {
    const U32x4 a = *reinterpret_cast<const U32x4 *>(o + c * 8);
    const U32x4 b = *reinterpret_cast<const U32x4 *>(dout + c * 8);
    const u32 av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      sum += Ops::to_float(static_cast<u16>(av[j] & 0xffff)) *
                 Ops::to_float(static_cast<u16>(bv[j] & 0xffff)) +
             Ops::to_float(static_cast<u16>(av[j] >> 16)) *
                 Ops::to_float(static_cast<u16>(bv[j] >> 16));
  }
  const i64 index = (static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row;
  p.dsum[index] = sum;
  U32x4 *accum = reinterpret_cast<U32x4 *>(p.dq_accum + index * cfg::kHeadDimQK);
  for (int c = 0; c < cfg::kHeadDimQK / 4; ++c) accum[c] = U32x4{0, 0, 0, 0};
}

// dQ = softmax_scale * accumulator, as 16 bits, into the strided dQ.
// Grid (ceil(seqlen_q / 128), heads_q, batch), 128 threads: one row each.
extern "C" __global__ void __launch_bounds__(128)
    flashjit_bwd_convert_dq(const flashjit::BwdParams p) {
  using namespace flashjit;
  using Ops = ElementOps<cfg::Element>;
  const int row = blockIdx.x * 128 + threadIdx.x;
  const int head = blockIdx.y, batch = blockIdx.z;
  if (row >= p.seqlen_q) return;
  const i64 index = (static_cast<i64>(batch) * p.heads_q + head) * p.seqlen_q + row;
  const float *accum = p.dq_accum + index * cfg::kHeadDimQK;
  u16 *dq = static_cast<u16 *>(p.dq) + batch * p.dq_batch_stride + head * p.dq_head_stride +
            row * p.dq_row_stride;
  for (int c = 0; c < cfg::kHeadDimQK / 8; ++c) {
    float f[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) f[j] = accum[c * 8 + j] * p.softmax_scale;
    *reinterpret_cast<U32x4 *>(dq + c * 8) = U32x4{Ops::pack(f[0], f[1]), Ops::pack(f[2], f[3]),
                                                   Ops::pack(f[4], f[5]), Ops::pack(f[6], f[7])};
  }
}
