// A naive fp32 attention kernel: the GPU reference for shapes too large for
// the float64 CPU reference (flashjit run --check, GPU tests). Deliberately
// independent of the fast kernels' building blocks (no mma, no common/*.cuh)
// so that a bug there cannot hide by appearing on both sides of a check.
//
// One CTA of kRefThreads threads per (kRefBlockM query rows, head, batch).
// Two passes over the keys: the first finds each row's max and sum, the
// second forms P = exp(s - rowmax) against the final max (so the
// same-precision variant rounds exactly the P that DESIGN.md's baseline
// specifies, with no running-max rescaling) and accumulates P·V.
//
// A caller's modifiers come in through the program's prelude, as the fast
// kernels' (generator/modifier_source.h: cfg::Modifiers, NoModifiers
// without): score_mod on each scaled score after the softcap, mask_mod on
// top of the built-in mask, both only where the sequence holds the query
// and the key; learned sinks (kSinks) start each row's max and sum.
//
// The parameter block is plain data, so the host includes this file too.
#pragma once

namespace flashjit {

struct RefAttentionParams {
  // 16-bit or e4m3 elements (q_e4m3, kv_e4m3), [batch, seqlen, heads, dim]
  // with strides.
  const void *q;
  const void *k;
  const void *v;
  float *o;    // [batch, seqlen_q, heads_q, head_dim_v], packed fp32
  float *lse;  // [batch, heads_q, seqlen_q]; may be null

  long long q_batch_stride, q_row_stride, q_head_stride;
  long long k_batch_stride, k_row_stride, k_head_stride;
  long long v_batch_stride, v_row_stride, v_head_stride;

  int seqlen_q;
  int seqlen_k;
  int heads_q;
  int heads_per_kv;
  int head_dim_qk;
  int head_dim_v;
  int window_left;   // -1: unbounded
  int window_right;  // -1: unbounded
  float scale;
  float softcap;  // 0: off
  int is_fp16;    // else bf16: 16-bit inputs' type, or O's under e4m3 Q
  // Round P to the element type before P·V and the output after it.
  int same_precision;
  // The modifiers' struct Aux (inline, as FwdParams::aux) and the learned
  // sinks (heads_q logits; read under cfg::Modifiers::kSinks only).
  const float *sinks;
  unsigned long long aux[8];
  // e4m3 inputs: Q's (q_e4m3), K's and V's (kv_e4m3, also an fp8 cache
  // under 16-bit Q) are bytes read times their descale, indexed [batch][kv
  // head] with these element strides (ForwardArgs::descale).
  int q_e4m3, kv_e4m3;
  const float *q_descale, *k_descale, *v_descale;
  long long descale_batch_stride, descale_head_stride;
  int attention_chunk;  // 0: off; else keys of the row's own chunk only (Problem)
};

constexpr int kRefBlockM = 16;
constexpr int kRefBlockN = 32;  // one key per lane
constexpr int kRefThreads = 128;
constexpr int kRefMaxHeadDim = 256;

#if defined(__CUDACC__)
#define FLASHJIT_REF_HD __host__ __device__
#else
#define FLASHJIT_REF_HD
#endif

// Shared-memory rows are padded to a multiple of 4 floats (float4 loads) plus
// 4, which makes the row pitch an odd number of 16-byte units whenever the
// head dim is a multiple of 8: lanes reading one float4 from each of 32 rows
// then hit distinct banks.
FLASHJIT_REF_HD constexpr int ref_smem_pitch(int dim) { return (dim + 3) / 4 * 4 + 4; }
FLASHJIT_REF_HD constexpr int ref_smem_floats(int head_dim_qk, int head_dim_v) {
  return kRefBlockM * ref_smem_pitch(head_dim_qk) +
         kRefBlockN * ref_smem_pitch(head_dim_qk > head_dim_v ? head_dim_qk : head_dim_v) +
         kRefBlockM * kRefBlockN;
}

}  // namespace flashjit

#if defined(__CUDACC__)


namespace flashjit {
namespace ref {

// Whether key j lies in the chunk of row position `pos` (floor division:
// `pos` is negative for the first rows where seqlen_q > seqlen_k).
__device__ __forceinline__ bool same_chunk(int pos, int j, int chunk) {
  if (chunk <= 0) return true;
  const int row_chunk = pos >= 0 ? pos / chunk : -((-pos + chunk - 1) / chunk);
  return j / chunk == row_chunk;
}

constexpr int kWarps = kRefThreads / 32;
constexpr int kRowsPerWarp = kRefBlockM / kWarps;
constexpr int kMaxColsPerThread = kRefMaxHeadDim / kRefThreads;
__device__ __forceinline__ float neg_inf() { return __uint_as_float(0xff800000u); }

__device__ __forceinline__ float load_element(const void *base, long long index, bool fp16) {
  const unsigned short bits = static_cast<const unsigned short *>(base)[index];
  if (fp16) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
  }
  return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}

// e4m3 from its fields in integer arithmetic (no cvt.e4m3x2, which needs
// sm_89, and nothing shared with the fast kernels): bias 7, exponent 0
// subnormal (m * 2^-9), S.1111.111 NaN.
__device__ __forceinline__ float e4m3_to_float(unsigned int bits) {
  const unsigned int sign = (bits & 0x80u) << 24, exponent = (bits >> 3) & 15u, mantissa = bits & 7u;
  float magnitude;
  if (exponent == 15u && mantissa == 7u)
    magnitude = __uint_as_float(0x7fc00000u);
  else if (exponent == 0u)
    magnitude = static_cast<float>(mantissa) * (1.f / 512.f);
  else
    magnitude = __uint_as_float(((exponent + 120u) << 23) | (mantissa << 20));
  return __uint_as_float(__float_as_uint(magnitude) | sign);
}

// An input element: 16-bit, or e4m3 times its descale.
__device__ __forceinline__ float load_input(const void *base, long long index, bool fp16,
                                            bool e4m3, float descale) {
  if (e4m3) return e4m3_to_float(static_cast<const unsigned char *>(base)[index]) * descale;
  return load_element(base, index, fp16);
}

// A tensor's descale of (batch b, KV head hk); 1 without one.
__device__ __forceinline__ float descale_of(const RefAttentionParams &p, const float *descale,
                                            int b, int hk) {
  return descale ? descale[b * p.descale_batch_stride + hk * p.descale_head_stride] : 1.f;
}

__device__ __forceinline__ float round_element(float x, bool fp16) {
  unsigned short bits;
  if (fp16) {
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(x));
    return load_element(&bits, 0, true);
  }
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
  return __uint_as_float(static_cast<unsigned int>(bits) << 16);
}

__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Rows [first_row, first_row + rows) of a [seqlen, dim] slice into shared
// memory as fp32; rows past `limit` and the padding columns become zero.
__device__ void load_tile(float *dst, int pitch, int rows, const void *src, long long base,
                          long long row_stride, int first_row, int limit, int dim, int dim_padded,
                          bool fp16, bool e4m3 = false, float descale = 1.f) {
  for (int idx = threadIdx.x; idx < rows * dim_padded; idx += kRefThreads) {
    const int r = idx / dim_padded, c = idx % dim_padded;
    const int row = first_row + r;
    dst[r * pitch + c] = (row < limit && c < dim)
                             ? load_input(src, base + row * row_stride + c, fp16, e4m3, descale)
                             : 0.f;
  }
}

// The scores of this lane's key (column `lane` of the K tile) against the
// warp's rows, masked to -inf where invisible or out of range.
__device__ __forceinline__ void tile_scores(const RefAttentionParams &p, const float *qs,
                                            int q_pitch, const float *ks, int k_pitch,
                                            int first_row, int first_key, int b, int h,
                                            float (&s)[kRowsPerWarp]) {
  using Modifiers = cfg::Modifiers;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float dot[kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) dot[t] = 0.f;
  const float4 *krow = reinterpret_cast<const float4 *>(ks + lane * k_pitch);
  const int chunks = (p.head_dim_qk + 3) / 4;
  for (int c = 0; c < chunks; ++c) {
    const float4 kv = krow[c];
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const float4 qv = reinterpret_cast<const float4 *>(qs + (warp + kWarps * t) * q_pitch)[c];
      dot[t] += qv.x * kv.x + qv.y * kv.y + qv.z * kv.z + qv.w * kv.w;
    }
  }
  const int j = first_key + lane;
  const int offset = p.seqlen_k - p.seqlen_q;
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    const int i = first_row + warp + kWarps * t;
    const bool inside = i < p.seqlen_q && j < p.seqlen_k;
    bool visible = inside && (p.window_left < 0 || j >= i + offset - p.window_left) &&
                   (p.window_right < 0 || j <= i + offset + p.window_right) &&
                   same_chunk(i + offset, j, p.attention_chunk);
    float x = dot[t] * p.scale;
    if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
    if constexpr (Modifiers::kScore)
      if (inside) x = Modifiers::score(x, b, h, i, j, p.aux);
    if constexpr (Modifiers::kMask)
      if (visible) visible = Modifiers::visible(b, h, i, j, p.aux);
    s[t] = visible ? x : neg_inf();
  }
}

}  // namespace ref

extern "C" __global__ void __launch_bounds__(kRefThreads)
    flashjit_reference_attention(const RefAttentionParams p) {
  using namespace ref;
  extern __shared__ float4 smem4[];
  float *smem = reinterpret_cast<float *>(smem4);
  const int h = blockIdx.y, b = blockIdx.z;
  const int hk = h / p.heads_per_kv;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_row = blockIdx.x * kRefBlockM;
  const bool fp16 = p.is_fp16 != 0;

  const int q_pitch = ref_smem_pitch(p.head_dim_qk);
  const int dmax = p.head_dim_qk > p.head_dim_v ? p.head_dim_qk : p.head_dim_v;
  const int kv_pitch = ref_smem_pitch(dmax);
  float *qs = smem;
  float *kvs = qs + kRefBlockM * q_pitch;
  float *ps = kvs + kRefBlockN * kv_pitch;

  const long long q_base = b * p.q_batch_stride + h * p.q_head_stride;
  const long long k_base = b * p.k_batch_stride + hk * p.k_head_stride;
  const long long v_base = b * p.v_batch_stride + hk * p.v_head_stride;
  const int dqk_padded = (p.head_dim_qk + 3) / 4 * 4;
  const int dv_padded = (p.head_dim_v + 3) / 4 * 4;
  const bool q_e4m3 = p.q_e4m3 != 0, kv_e4m3 = p.kv_e4m3 != 0;
  const float q_descale = descale_of(p, p.q_descale, b, hk);
  const float k_descale = descale_of(p, p.k_descale, b, hk);
  const float v_descale = descale_of(p, p.v_descale, b, hk);
  load_tile(qs, q_pitch, kRefBlockM, p.q, q_base, p.q_row_stride, first_row, p.seqlen_q,
            p.head_dim_qk, dqk_padded, fp16, q_e4m3, q_descale);

  // Keys any row of this block can see; tiles outside are skipped.
  const int offset = p.seqlen_k - p.seqlen_q;
  const int last_row = min(first_row + kRefBlockM, p.seqlen_q) - 1;
  int key_begin = 0, key_end = p.seqlen_k;
  if (p.window_left >= 0) key_begin = max(0, first_row + offset - p.window_left);
  if (p.window_right >= 0) key_end = min(p.seqlen_k, last_row + offset + p.window_right + 1);
  const int tile_begin = key_begin / kRefBlockN * kRefBlockN;

  // Pass 1: row max and sum, online. Every lane of a warp holds its rows' state.
  // A learned sink is a key without a value: the rows start with it.
  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp];
#pragma unroll
  for (int t = 0; t < kRowsPerWarp; ++t) {
    row_max[t] = neg_inf(), row_sum[t] = 0.f;
    if constexpr (cfg::Modifiers::kSinks) row_max[t] = p.sinks[h], row_sum[t] = 1.f;
  }
  for (int n0 = tile_begin; n0 < key_end; n0 += kRefBlockN) {
    __syncthreads();
    load_tile(kvs, kv_pitch, kRefBlockN, p.k, k_base, p.k_row_stride, n0, p.seqlen_k,
              p.head_dim_qk, dqk_padded, fp16, kv_e4m3, k_descale);
    __syncthreads();
    float s[kRowsPerWarp];
    tile_scores(p, qs, q_pitch, kvs, kv_pitch, first_row, n0, b, h, s);
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      const float new_max = fmaxf(row_max[t], warp_max(s[t]));
      if (new_max == neg_inf()) continue;  // nothing visible yet
      row_sum[t] = row_sum[t] * expf(row_max[t] - new_max) + warp_sum(expf(s[t] - new_max));
      row_max[t] = new_max;
    }
  }

  // Pass 2: O = P·V with P against the final row max.
  float acc[kRefBlockM][kMaxColsPerThread];
#pragma unroll
  for (int r = 0; r < kRefBlockM; ++r)
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) acc[r][j] = 0.f;
  for (int n0 = tile_begin; n0 < key_end; n0 += kRefBlockN) {
    __syncthreads();
    load_tile(kvs, kv_pitch, kRefBlockN, p.k, k_base, p.k_row_stride, n0, p.seqlen_k,
              p.head_dim_qk, dqk_padded, fp16, kv_e4m3, k_descale);
    __syncthreads();
    float s[kRowsPerWarp];
    tile_scores(p, qs, q_pitch, kvs, kv_pitch, first_row, n0, b, h, s);
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      float prob = row_max[t] == neg_inf() ? 0.f : expf(s[t] - row_max[t]);
      if (p.same_precision) prob = round_element(prob, fp16);
      ps[(warp + kWarps * t) * kRefBlockN + lane] = prob;
    }
    __syncthreads();
    load_tile(kvs, kv_pitch, kRefBlockN, p.v, v_base, p.v_row_stride, n0, p.seqlen_k,
              p.head_dim_v, dv_padded, fp16, kv_e4m3, v_descale);
    __syncthreads();
    for (int n = 0; n < kRefBlockN; n += 4) {
      float vv[4][kMaxColsPerThread];
#pragma unroll
      for (int j = 0; j < kMaxColsPerThread; ++j) {
        const int c = threadIdx.x + kRefThreads * j;
#pragma unroll
        for (int u = 0; u < 4; ++u) vv[u][j] = c < p.head_dim_v ? kvs[(n + u) * kv_pitch + c] : 0.f;
      }
#pragma unroll
      for (int r = 0; r < kRefBlockM; ++r) {
        const float4 pr = reinterpret_cast<const float4 *>(ps + r * kRefBlockN + n)[0];
#pragma unroll
        for (int j = 0; j < kMaxColsPerThread; ++j)
          acc[r][j] += pr.x * vv[0][j] + pr.y * vv[1][j] + pr.z * vv[2][j] + pr.w * vv[3][j];
      }
    }
  }

  // Hand each row's max and sum from the warp that owns it to every thread.
  __syncthreads();
  float *stats = ps;  // [kRefBlockM][2]
  if (lane == 0) {
#pragma unroll
    for (int t = 0; t < kRowsPerWarp; ++t) {
      stats[(warp + kWarps * t) * 2] = row_max[t];
      stats[(warp + kWarps * t) * 2 + 1] = row_sum[t];
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < kRefBlockM; ++r) {
    const int i = first_row + r;
    if (i >= p.seqlen_q) break;
    const float m = stats[r * 2], l = stats[r * 2 + 1];
    // No visible key: O = 0, LSE = +inf (with a sink, m is the sink and
    // l = 1: O = 0, LSE = the sink).
    const bool empty = m == neg_inf();
    float *orow = p.o + ((static_cast<long long>(b) * p.seqlen_q + i) * p.heads_q + h) *
                            static_cast<long long>(p.head_dim_v);
#pragma unroll
    for (int j = 0; j < kMaxColsPerThread; ++j) {
      const int c = threadIdx.x + kRefThreads * j;
      if (c >= p.head_dim_v) continue;
      float o = empty ? 0.f : acc[r][j] / l;
      if (p.same_precision) o = round_element(o, fp16);
      orow[c] = o;
    }
    if (p.lse != nullptr && threadIdx.x == 0)
      p.lse[(static_cast<long long>(b) * p.heads_q + h) * p.seqlen_q + i] =
          empty ? __uint_as_float(0x7f800000u) : m + logf(l);
  }
}

}  // namespace flashjit

#endif  // __CUDACC__
