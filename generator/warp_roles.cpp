#include "generator/warp_roles.h"

#include "templates/common/bwd_sm90_layout.cuh"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {

std::optional<WarpRoleRegisters> warp_role_registers(const KernelSpec &spec) {
  if (spec.config.path != KernelPath::sm90) return std::nullopt;
  // The CTA's pool is what the launch allocated (168 per thread at 384
  // threads, 128 at 512): producer + consumers must stay within it, or the
  // consumers' setmaxnreg.inc waits forever (the kernels static_assert it).
  if (spec.pass == Pass::backward) {
    // A 192-wide tile's producer issues twice the TMA boxes (32 columns
    // each, bwd_sm90.cuh) and spilled 12-44 bytes at 24; its consumers
    // (96-column halves) need no more than 192.
    // With 128 keys at 192/128 (no split) the consumers hold dK and dV of
    // their own keys' whole head dims: at 40/232 ptxas serialised their
    // wgmmas; at 24/240 it does not (its producer keeps some state in local
    // memory, kProducerSpillBytes).
    if ((sm90_backward_tile_head_dim(spec.head_dim_qk, spec.head_dim_v) == 192 ||
         sm90_backward_tile_head_dim(spec.head_dim_v, spec.head_dim_qk) == 192) &&
        sm90_backward_splits_head_dim(spec.head_dim_qk, spec.head_dim_v, spec.config.block_n))
      return WarpRoleRegisters{40, 232, 2};
    // FlashAttention-3's 24/240 split: 232/40 spilled the consumers at d=64.
    return WarpRoleRegisters{24, 240, 2};
  }
  // One consumer warpgroup (block_m 64, 256 threads, a pool of 2 x 256):
  // the budgets of two, which the register tiles were sized for. Two such
  // CTAs an SM (launch bounds of 2, 24/232 from a pool of 2 x 128) measured
  // slower on the H200 (docs/PERF.md), so one.
  // A paged cache's producer warp also reads page indices and shuffles them
  // to its leader: 24 registers spilled 12-16 bytes there (ptxas -v).
  // At head dim 256 the consumer overlaps S(t+1) with P(t) V: a packed
  // batch's paged or counted cache spilled 16-76 bytes at 232-240, none at
  // 256 (a pool of 256 registers x 256 threads holds it).
  const bool paged = spec.page_size > 0;
  // e4m3: the producer warpgroup's other three warps transpose V tiles
  // (fwd_sm90_v_transpose.cuh: 16 bytes of 4 keys in, 16 words out, in
  // registers) and walk the work tiles: at 40 registers that spilled 8-24
  // bytes (48 leaves the consumers 228, no multiple of 8), so 56, as
  // FlashAttention-3 gives that role; the consumers' O, S and P fit 224
  // without spills up to head dim 128, and at 256 (no intra-warpgroup
  // overlap) spill 8 bytes under a causal mask. One consumer warpgroup
  // (decode; a pool of 2 x 256): 96/256, where a 16-bit Q quantized at head
  // dim 256 spilled 12-40 bytes at 56/240.
  if (spec.kv_dtype == DType::e4m3)
    return spec.config.block_m == 64 ? WarpRoleRegisters{96, 256, 1}
                                     : WarpRoleRegisters{56, 224, 2};
  // Two consumer warpgroups per 64 rows past head dim 256 (O 128 registers
  // each beside S and P of 32-48 keys and the S exchange's addresses):
  // 24/240 leaves 8 bytes of the prologue's in local memory (two words
  // reloaded per work tile), 40/232 spilled 32 bytes, 56/224 56 (ptxas,
  // d=512 64 x 32).
  if (sm90_forward_column_split(spec.head_dim_qk, spec.head_dim_v) == 2)
    return WarpRoleRegisters{24, 240, 2};
  if (spec.config.block_m == 64) {
    const bool d256 = sm90_forward_tile_head_dim(spec.head_dim_qk) == 256;
    if (paged) return WarpRoleRegisters{56, d256 ? 256 : 240, 1};
    return d256 ? WarpRoleRegisters{40, 256, 1} : WarpRoleRegisters{24, 240, 1};
  }
  if (paged && spec.config.block_m == 128) return WarpRoleRegisters{40, 232, 2};
  if (paged && spec.config.block_m == 192) return WarpRoleRegisters{48, 152, 3};
  // FlashAttention-3's 24/240 split, except at head dim 256, whose producer
  // (4 TMA boxes per tile) spilled 40-52 bytes at 24 registers; its
  // consumers, overlapping S(t+1) with P(t) V (O 128, S 40, P 20 registers
  // at block_n 80), fit 232 without spills.
  if (sm90_forward_tile_head_dim(spec.head_dim_qk) == 256) return WarpRoleRegisters{40, 232, 2};
  // Three consumer warpgroups (block_m 192, 512 threads, a pool of 4 x 128):
  // FlashAttention-3's 32/160, which fills it exactly.
  if (spec.config.block_m == 192) return WarpRoleRegisters{32, 160, 3};
  return WarpRoleRegisters{24, 240, 2};
}

}  // namespace flashjit
