// The resource report `ptxas -v` writes into NVRTC's log: the only source of
// register and spill counts when compiling for a GPU that is not present.
#pragma once

#include <optional>

#include "llvm/ADT/StringRef.h"

namespace flashjit::cli {

struct PtxasReport {
  int registers = 0;
  int static_smem_bytes = 0;
  int stack_frame_bytes = 0;
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
};

// The report of `entry` (the first function's when `entry` is empty), or
// nothing when the log has none (ptxas ran without -v).
std::optional<PtxasReport> parse_ptxas_report(llvm::StringRef log, llvm::StringRef entry = "");

}  // namespace flashjit::cli
