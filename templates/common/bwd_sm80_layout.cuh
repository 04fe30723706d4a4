// The sm80 backward's layout arithmetic: the main kernel's (bwd_sm80.cuh)
// warp tilings of its three GEMM phases, MMA extents, shared-memory rows,
// every buffer's place and the whole footprint, and the deterministic dQ
// kernel's (bwd_dq_sm80.cuh). Plain constexpr C++ with no CUDA and no
// includes, so the kernels and their host twin
// (generator/bwd_sm80_traits.cpp, which prunes configs before any compile
// and sizes the launches) compile the same code and cannot disagree.
#pragma once

namespace flashjit {

struct BwdSm80Layout {
  int head_dim_qk;
  int head_dim_v;
  int block_m;  // query rows per tile of the inner loop
  int block_n;  // keys per CTA
  int warps;
  int stages;  // Q/dO buffers: 2 overlaps the next tile's loads

  static constexpr int kElementBytes = 2;
  // Keys per tile of the deterministic dQ kernel: S and dP take 32
  // registers each.
  static constexpr int kDqBlockN = 64;

  static constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

  constexpr int threads() const { return 32 * warps; }
  // The head dims' MMA extents (zero-padded), and the shared rows: whole
  // 64-element swizzle atoms of the head dims, and of the queries for P^T
  // and dS^T.
  // Past 256, whole 64 columns: 4 warps' pairs of n8 tiles across dK's and
  // dV's columns.
  constexpr int dim_qk() const { return round_up(head_dim_qk, head_dim_qk > 256 ? 64 : 32); }
  constexpr int dim_v() const { return round_up(head_dim_v, head_dim_v > 256 ? 64 : 32); }
  constexpr int smem_dim_qk() const { return round_up(head_dim_qk, 64); }
  constexpr int smem_dim_v() const { return round_up(head_dim_v, 64); }
  constexpr int smem_dim_m() const { return round_up(block_m, 64); }

  // (a) S^T and dP^T: block_n x block_m over warps_s_m() x warps_s_n()
  // warps, each s_m_tiles() m16 x s_n_tiles() n8 tiles. Past head dim 256
  // (32 keys over 8 warps) 16 keys a warp: 2 x 4.
  constexpr int warps_s_n() const {
    const int by_queries = block_m >= 64 && warps >= 8 ? 2 : 1;
    const bool wide = head_dim_qk > 256 || head_dim_v > 256;
    const int by_keys = wide && block_n >= 16 && warps > block_n / 16 ? warps / (block_n / 16) : 1;
    return by_queries > by_keys ? by_queries : by_keys;
  }
  constexpr int warps_s_m() const { return warps / warps_s_n(); }
  constexpr int s_m_tiles() const { return block_n / (16 * warps_s_m()); }
  constexpr int s_n_tiles() const { return block_m / (8 * warps_s_n()); }
  // (b) dK, dV: block_n x head dim.
  constexpr int warps_kv_m() const { return warps < block_n / 16 ? warps : block_n / 16; }
  constexpr int warps_kv_n() const { return warps / warps_kv_m(); }
  constexpr int kv_m_tiles() const { return block_n / (16 * warps_kv_m()); }
  constexpr int kv_n_tiles_qk() const { return dim_qk() / (8 * warps_kv_n()); }
  constexpr int kv_n_tiles_v() const { return dim_v() / (8 * warps_kv_n()); }
  // (c) dQ: block_m x head dim, in dq_chunks() column chunks one after
  // another: past head dim 256 a whole row of dQ would sit beside dK's and
  // dV's accumulators (128 + 128 registers at 512), so it goes out in
  // chunks of 64 columns (16 registers; 128 spilled at 512).
  constexpr int warps_q_m() const { return warps < block_m / 16 ? warps : block_m / 16; }
  constexpr int warps_q_n() const { return warps / warps_q_m(); }
  constexpr int q_m_tiles() const { return block_m / (16 * warps_q_m()); }
  constexpr int dq_chunk_columns() const {
    return dim_qk() <= 256 ? dim_qk() : 64;
  }
  constexpr int dq_chunks() const { return dim_qk() / dq_chunk_columns(); }
  constexpr int q_n_tiles() const { return dq_chunk_columns() / (8 * warps_q_n()); }
  // fp32 accumulator registers per thread at the peak: dK and dV, with S^T
  // and dP^T.
  constexpr int accumulator_registers() const {
    return (block_n / warps_kv_m()) * (dim_qk() + dim_v()) / warps_kv_n() / 32 +
           2 * ((block_n / warps_s_m()) * (block_m / warps_s_n()) / 32);
  }

  // Shared memory, in 16-bit elements (LSE and D are fp32: two each): K, V;
  // `stages` of Q and of dO; P^T, dS^T; then LSE_log2[stages][block_m] and
  // D[stages][block_m].
  constexpr int k_elements() const { return block_n * smem_dim_qk(); }
  constexpr int v_elements() const { return block_n * smem_dim_v(); }
  constexpr int q_elements() const { return block_m * smem_dim_qk(); }
  constexpr int do_elements() const { return block_m * smem_dim_v(); }
  constexpr int p_elements() const { return block_n * smem_dim_m(); }
  constexpr int offset_v() const { return k_elements(); }
  constexpr int offset_q() const { return offset_v() + v_elements(); }
  constexpr int offset_do() const { return offset_q() + stages * q_elements(); }
  constexpr int offset_p() const { return offset_do() + stages * do_elements(); }
  constexpr int offset_ds() const { return offset_p() + p_elements(); }
  constexpr int offset_stats() const { return offset_ds() + p_elements(); }
  constexpr int smem_elements() const { return offset_stats() + 2 * stages * block_m * 2; }
  // The main kernel's dynamic shared memory.
  constexpr int smem_bytes() const { return smem_elements() * kElementBytes; }

  // The deterministic dQ kernel: one warp per 16 query rows; Q and dO once,
  // then `stages` (K, V) tiles of kDqBlockN keys.
  constexpr int dq_warps() const { return block_m / 16; }
  constexpr int dq_threads() const { return 32 * dq_warps(); }
  constexpr int dq_offset_do() const { return block_m * smem_dim_qk(); }
  constexpr int dq_offset_kv() const { return dq_offset_do() + block_m * smem_dim_v(); }
  constexpr int dq_stage_elements() const { return kDqBlockN * (smem_dim_qk() + smem_dim_v()); }
  constexpr int dq_smem_elements() const { return dq_offset_kv() + stages * dq_stage_elements(); }
  constexpr int dq_smem_bytes() const { return dq_smem_elements() * kElementBytes; }
};

}  // namespace flashjit
