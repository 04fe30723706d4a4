// The block map of a caller's mask_mod, enqueued before the kernel that
// reads it (generator/block_map.h has its geometry; the forward's and the
// backward's parameter blocks carry the same block_map fields).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "generator/block_map.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/loaded_kernel.h"
#include "runtime/workspace_pool.h"

namespace flashjit {

// Builds `map` on `stream` into a workspace of its own, from flashjit's pool,
// with the `kinds` and `list` kernels of the call's program, and points
// `params` at it; returns the workspace, for the caller to free in stream
// order after the kernel that reads it. `rows_are`/`tiles_are` name the
// map's rows and tiles in the error of a map too large to index.
template <class Params>
llvm::Expected<CUdeviceptr> enqueue_block_map(const LoadedKernel &kinds, const LoadedKernel &list,
                                              const BlockMapGeometry &map, Params &params,
                                              CUstream stream, const char *tiles_are) {
  // The kernels index the map with an int (common/block_map.cuh).
  if (map.list_bytes() / 4 >= (uint64_t(1) << 31))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the mask_mod's block map would hold {0} entries ({1} rows of {2} {3}), "
                      "more than 2^31: split the batch, or set mask_mod_qk_only where the mask "
                      "reads only q and k",
                      map.list_bytes() / 4, map.rows(), map.tiles, tiles_are)
            .str());
  auto allocated = allocate_workspace(kinds.device(), map.workspace_bytes(), stream);
  if (!allocated)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the mask_mod's block map of {0} bytes could not be allocated: {1}",
                      map.workspace_bytes(), llvm::toString(allocated.takeError()))
            .str());
  const CUdeviceptr workspace = *allocated;
  params.block_map = reinterpret_cast<int *>(workspace);
  params.block_kinds = reinterpret_cast<unsigned char *>(workspace + map.kinds_offset());
  params.block_map_batch_stride = map.batch_stride();
  params.block_map_head_stride = map.head_stride();
  params.block_map_row_stride = static_cast<int>(map.tiles + 1);
  int rows = static_cast<int>(map.rows());
  void *kinds_args[] = {&params};
  void *list_args[] = {&params, &rows};
  llvm::Error error = map.rows() == 0 || map.tiles == 0
                          ? llvm::Error::success()
                          : kinds.launch(map.kinds_launch(), stream, kinds_args);
  if (!error && map.rows() > 0) error = list.launch(map.list_launch(), stream, list_args);
  if (error) return llvm::joinErrors(std::move(error), free_workspace(workspace, stream));
  return workspace;
}

}  // namespace flashjit
