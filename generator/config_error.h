// Shared by the kernel families' traits: why a config is invalid, as one
// error naming the family, the config and every reason.
#pragma once

#include <string>
#include <vector>

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {

// The reason a config needing `needed` bytes of shared memory does not fit.
inline std::string smem_reason(int needed, int allowed) {
  return llvm::formatv("needs {0} bytes of shared memory, the device allows {1}", needed, allowed);
}

// Why an sm90 family (`kernel`: "the sm90 kernel", "the sm90 backward")
// cannot take one of the head dims (empty: it takes both): TMA rows of whole
// 16 bytes, at most the widest tile of `tiles` ("64, 128 or 256").
inline std::string sm90_head_dims_reason(llvm::StringRef kernel, llvm::StringRef tiles,
                                         int head_dim_qk, int head_dim_v) {
  for (auto [name, d] : {std::pair{"head_dim", head_dim_qk}, {"head_dim_v", head_dim_v}})
    if (!sm90_head_dim_served(d))
      return llvm::formatv("{0}={1}: {2} serves head dims that are multiples of 8 from 32 to 256 "
                           "(16-byte TMA rows, tiled as {3})",
                           name, d, kernel, tiles);
  return "";
}

// `family` is e.g. "sm80 forward"; `why` must not be empty.
inline llvm::Error invalid_config(llvm::StringRef family, int block_m, int block_n, int warps,
                                  int stages, int head_dim_qk, int head_dim_v,
                                  const std::vector<std::string> &why) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} config (block_m={1} block_n={2} warps={3} stages={4}, d={5} dv={6}) is "
                    "invalid: {7}",
                    family, block_m, block_n, warps, stages, head_dim_qk, head_dim_v,
                    llvm::join(why, "; "))
          .str());
}

}  // namespace flashjit
