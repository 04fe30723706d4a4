// The sm80 forward's layout arithmetic (fwd_sm80.cuh): each warp's register
// tiles, the shared-memory rows, the Q tile and the ring of K/V stages, and
// the whole footprint. Plain constexpr C++ with no CUDA and no includes, so
// the kernel and its host twin (generator/fwd_sm80_traits.cpp, which prunes
// configs before any compile and sizes the launch) compile the same code and
// cannot disagree.
#pragma once

namespace flashjit {

struct FwdSm80Layout {
  int head_dim_qk;
  int head_dim_v;
  int block_m;  // query rows per CTA, split between the warps
  int block_n;  // keys per K/V tile
  int warps;
  int stages;  // (K tile, V tile) pairs in the ring

  static constexpr int kElementBytes = 2;
  // Shared-memory rows are padded to whole 64-element (128-byte) swizzle
  // atoms, so every ldmatrix and cp.async of a row is bank-conflict free.
  static constexpr int kAtomColumns = 64;

  static constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

  constexpr int threads() const { return 32 * warps; }
  // Split-Q: each warp owns warp_rows() consecutive query rows, m_tiles()
  // m16 tiles of them.
  constexpr int warp_rows() const { return block_m / warps; }
  constexpr int m_tiles() const { return warp_rows() / 16; }
  // The 16-byte chunks of a row that the MMAs read (their k and n steps are
  // 16 wide; chunks past the head dim are zeroed once).
  constexpr int read_chunks_qk() const { return round_up(head_dim_qk, 16) / 8; }
  constexpr int read_chunks_v() const { return round_up(head_dim_v, 16) / 8; }
  constexpr int n_tiles_s() const { return block_n / 8; }      // n8 tiles of S
  constexpr int n_tiles_o() const { return read_chunks_v(); }  // n8 tiles of O
  // fp32 accumulator registers per thread: O and one S tile.
  constexpr int accumulator_registers() const {
    return m_tiles() * (n_tiles_o() + n_tiles_s()) * 4;
  }

  // Shared memory, in 16-bit elements: the Q tile once, then `stages`
  // (K tile, V tile) pairs. The output tile is staged through the same
  // space after the main loop.
  constexpr int smem_dim_qk() const { return round_up(head_dim_qk, kAtomColumns); }
  constexpr int smem_dim_v() const { return round_up(head_dim_v, kAtomColumns); }
  constexpr int q_elements() const { return block_m * smem_dim_qk(); }
  constexpr int k_elements() const { return block_n * smem_dim_qk(); }
  constexpr int v_elements() const { return block_n * smem_dim_v(); }
  constexpr int stage_elements() const { return k_elements() + v_elements(); }
  constexpr int smem_elements() const { return q_elements() + stages * stage_elements(); }
  // The dynamic shared memory to launch with.
  constexpr int smem_bytes() const { return smem_elements() * kElementBytes; }
};

}  // namespace flashjit
