#include "generator/fwd_sm80_traits.h"

#include <string>
#include <vector>

#include "generator/config_error.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<FwdSm80Traits> FwdSm80Traits::make(int head_dim_qk, int head_dim_v, int block_m,
                                                 int block_n, int warps, int stages,
                                                 int max_smem_bytes) {
  FwdSm80Traits t{head_dim_qk, head_dim_v, block_m, block_n, warps, stages};
  std::vector<std::string> why;
  if (head_dim_qk < 8 || head_dim_qk > 256 || head_dim_qk % 8)
    why.push_back(llvm::formatv("head_dim_qk={0} is not a multiple of 8 in [8, 256]{1}", head_dim_qk,
                                head_dim_qk > 256 ? " (past 256: the sm90 kernel, on sm_90a)" : ""));
  if (head_dim_v < 8 || head_dim_v > 256 || head_dim_v % 8)
    why.push_back(llvm::formatv("head_dim_v={0} is not a multiple of 8 in [8, 256]{1}", head_dim_v,
                                head_dim_v > 256 ? " (past 256: the sm90 kernel, on sm_90a)" : ""));
  if (warps != 1 && warps != 2 && warps != 4 && warps != 8)
    why.push_back(llvm::formatv("warps={0} is not 1, 2, 4 or 8", warps));
  else if (block_m <= 0 || block_m % (16 * warps) || block_m / (16 * warps) > 2)
    why.push_back(llvm::formatv(
        "block_m={0} must be 16 or 32 rows per warp (16*warps or 32*warps = {1} or {2})", block_m,
        16 * warps, 32 * warps));
  if (block_n < 16 || block_n > 256 || block_n % 16)
    why.push_back(llvm::formatv("block_n={0} is not a multiple of 16 in [16, 256]", block_n));
  if (stages < 2 || stages > 4)
    why.push_back(llvm::formatv("stages={0} is not in [2, 4]", stages));
  if (why.empty()) {
    if (t.accumulator_registers() > kMaxAccumulatorRegisters)
      why.push_back(llvm::formatv(
          "{0} fp32 accumulators per thread exceed {1} (O: {2} rows x {3} cols, S: {2} x {4} "
          "per warp); use more warps or a smaller block_n",
          t.accumulator_registers(), kMaxAccumulatorRegisters, block_m / warps, head_dim_v,
          block_n));
    if (max_smem_bytes > 0 && t.smem_bytes() > max_smem_bytes)
      why.push_back(smem_reason(t.smem_bytes(), max_smem_bytes));
  }
  if (!why.empty())
    return invalid_config("sm80 forward", block_m, block_n, warps, stages, head_dim_qk, head_dim_v,
                          why);
  return t;
}

}  // namespace flashjit
