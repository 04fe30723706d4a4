#include "generator/bwd_sm80_traits.h"

#include <algorithm>
#include <string>
#include <vector>

#include "generator/config_error.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<BwdSm80Traits> BwdSm80Traits::make(int head_dim_qk, int head_dim_v, int block_m,
                                                 int block_n, int warps, int stages,
                                                 int max_smem_bytes, bool deterministic) {
  BwdSm80Traits t{head_dim_qk, head_dim_v, block_m, block_n, warps, stages, deterministic};
  std::vector<std::string> why;
  for (auto [name, d] : {std::pair{"head_dim_qk", head_dim_qk}, {"head_dim_v", head_dim_v}})
    if (d < 8 || d > kMaxHeadDim || d % 8)
      why.push_back(llvm::formatv("{0}={1} is not a multiple of 8 in [8, {2}]", name, d,
                                  kMaxHeadDim));
  if (warps != 4 && warps != 8) why.push_back(llvm::formatv("warps={0} is not 4 or 8", warps));
  if (stages != 1 && stages != 2)
    why.push_back(llvm::formatv("stages={0} is not 1 or 2 (Q/dO buffers)", stages));
  if (block_m != 64 && block_m != 128)
    why.push_back(llvm::formatv("block_m={0} is not 64 or 128", block_m));
  if (block_n != 32 && block_n != 64 && block_n != 128)
    why.push_back(llvm::formatv("block_n={0} is not 32, 64 or 128", block_n));
  if (why.empty()) {
    // The kernel's static_asserts, in the same order.
    const BwdSm80Layout l = t.layout();
    if (block_n % (16 * l.warps_s_m()))
      why.push_back(llvm::formatv("block_n={0} leaves a warp less than 16 keys in S^T (needs "
                                  "a multiple of {1})",
                                  block_n, 16 * l.warps_s_m()));
    // 4 warps across dK's and dV's columns only past head dim 256, where 32
    // keys a CTA are what fits the registers (as S^T's split by keys,
    // BwdSm80Layout::warps_s_n); below, such tiles would only add
    // candidates that re-read Q and dO for fewer keys.
    const int max_kv_n = std::max(head_dim_qk, head_dim_v) > 256 ? 4 : 2;
    if (l.warps_kv_n() > max_kv_n)
      why.push_back(llvm::formatv("block_n={0} spreads dK/dV over more than {1} warps per key "
                                  "tile ({2} warps)",
                                  block_n, max_kv_n, warps));
    if (why.empty() && l.kv_n_tiles_qk() % 2)
      why.push_back("head dim does not split into pairs of n8 tiles per warp");
    if (why.empty() && t.accumulator_registers() > kMaxAccumulatorRegisters)
      why.push_back(llvm::formatv("{0} fp32 accumulators per thread exceed {1}; use more "
                                  "warps or smaller tiles",
                                  t.accumulator_registers(), kMaxAccumulatorRegisters));
    if (max_smem_bytes > 0 && t.smem_bytes() > max_smem_bytes)
      why.push_back(smem_reason(t.smem_bytes(), max_smem_bytes));
    if (deterministic && max_smem_bytes > 0 && t.dq_smem_bytes() > max_smem_bytes)
      why.push_back(llvm::formatv("the deterministic dQ kernel needs {0} bytes of shared "
                                  "memory, the device allows {1}",
                                  t.dq_smem_bytes(), max_smem_bytes));
  }
  if (!why.empty())
    return invalid_config("sm80 backward", block_m, block_n, warps, stages, head_dim_qk, head_dim_v,
                          why);
  return t;
}

}  // namespace flashjit
