// Stream-ordered scratch memory the library itself needs (the split-KV
// partials): allocated and freed on the caller's stream from a memory pool
// of flashjit's own per device, so concurrent streams never share a buffer,
// CUDA graph capture records the allocation as a node, and the caller's own
// allocator and the device's default pool are left alone. The pool keeps up
// to kRetainedBytes after a synchronisation: a decode step's workspace comes
// back without a new mapping (on an idle H200 a fresh one cost ~140 us a
// call with the default pool, which releases everything at every sync).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "llvm/Support/Error.h"

namespace flashjit {

constexpr uint64_t kRetainedWorkspaceBytes = 256ull << 20;

// `bytes` on `device` in `stream` order; free it with free_workspace on the
// same stream after the last kernel that uses it.
llvm::Expected<CUdeviceptr> allocate_workspace(CUdevice device, uint64_t bytes, CUstream stream);
llvm::Error free_workspace(CUdeviceptr ptr, CUstream stream);

}  // namespace flashjit
