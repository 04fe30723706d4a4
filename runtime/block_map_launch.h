// The block map of a caller's mask_mod, enqueued before the kernel that
// reads it (generator/block_map.h has its geometry; the forward's and the
// backward's parameter blocks carry the same block_map fields).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "flashjit/modifiers.h"
#include "generator/block_map.h"
#include "runtime/cuda_driver.h"
#include "templates/common/block_mask_grid.cuh"
#include "llvm/Support/Error.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/block_map_cache.h"
#include "runtime/loaded_kernel.h"
#include "runtime/workspace_pool.h"

namespace flashjit {

// Builds `map` on `stream` into a workspace of its own, from flashjit's pool,
// with the `kinds` and `list` kernels of the call's program (and `runs`,
// the forward's row runs, where the map has them), and points `params` at
// it; returns the workspace, for the caller to free in stream order after
// the kernel that reads it. With a caller's block `mask` (validated:
// validate_block_mask), its lists are first scattered into a grid in the
// same workspace by `grid` (the program's flashjit_block_mask_grid), and
// the kinds kernel reads that instead of calling mask_mod. A `reuse_key`
// (reusable_block_map_key, "" for none) points `params` at the map kept
// under it, built on the first call, and returns 0: nothing to free.
// `tiles_are` names the map's tiles in the error of a map too large to
// index.
template <class Params>
llvm::Expected<CUdeviceptr> enqueue_block_map(const LoadedKernel &kinds, const LoadedKernel &list,
                                              const LoadedKernel &grid, const LoadedKernel *runs,
                                              const BlockMask *mask, const BlockMapGeometry &map,
                                              Params &params, CUstream stream,
                                              const char *tiles_are,
                                              const std::string &reuse_key = "") {
  // The kernels index the map with an int, and an entry's tile with 27 bits
  // (common/block_map.cuh).
  if (map.list_bytes() / 4 >= (uint64_t(1) << 31) || map.tiles >= (int64_t(1) << 27))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the mask_mod's block map would hold {0} entries ({1} rows of {2} {3}), "
                      "more than 2^31: split the batch, or set mask_mod_qk_only where the mask "
                      "reads only q and k",
                      map.list_bytes() / 4, map.rows(), map.tiles, tiles_are)
            .str());
  const uint64_t grid_bytes = mask ? block_mask_grid_bytes(*mask) : 0;
  const uint64_t bytes = mask ? map.grid_offset() + grid_bytes : map.workspace_bytes();
  // The forward's row runs of partial tiles, where its kernel reads them.
  const bool with_runs = runs && map.run_words > 0;
  auto bind = [&](CUdeviceptr workspace) {
    params.block_map = reinterpret_cast<int *>(workspace);
    params.block_kinds = reinterpret_cast<unsigned char *>(workspace + map.kinds_offset());
    params.block_map_batch_stride = map.batch_stride();
    params.block_map_head_stride = map.head_stride();
    params.block_map_row_stride = static_cast<int>(map.tiles + 1);
    if constexpr (requires { params.block_runs; }) {
      params.block_run_positions =
          with_runs ? reinterpret_cast<int *>(workspace + map.run_positions_offset()) : nullptr;
      params.block_runs =
          with_runs ? reinterpret_cast<unsigned *>(workspace + map.runs_offset()) : nullptr;
    }
  };
  // The caller's lists into the grid (zeroed first), then the kinds, the
  // list and the runs, in stream order.
  auto enqueue = [&](CUdeviceptr workspace) -> llvm::Error {
    if (map.rows() == 0) return llvm::Error::success();
    BlockMaskGrid kinds_grid{};
    BlockMaskLists lists{};
    if (mask) {
      auto *grid_bytes_at = reinterpret_cast<unsigned char *>(workspace + map.grid_offset());
      kinds_grid = BlockMaskGrid{grid_bytes_at,
                                 mask->block_q,
                                 mask->block_k,
                                 static_cast<int>(mask->batches),
                                 static_cast<int>(mask->heads),
                                 static_cast<int>(mask->q_blocks),
                                 static_cast<int>(mask->k_blocks)};
      lists = BlockMaskLists{mask->kv_num_blocks,
                             mask->kv_indices,
                             mask->full_kv_num_blocks,
                             mask->full_kv_indices,
                             grid_bytes_at,
                             static_cast<int>(mask->batches * mask->heads * mask->q_blocks),
                             static_cast<int>(mask->k_blocks)};
    }
    int rows = static_cast<int>(map.rows());
    void *grid_args[] = {&lists};
    void *kinds_args[] = {&params, &kinds_grid};
    void *list_args[] = {&params, &rows};
    if (mask && map.tiles > 0) {
      auto driver = cuda_driver();
      if (!driver) return driver.takeError();
      if (llvm::Error e = cuda_check(
              driver->cuMemsetD8Async(workspace + map.grid_offset(), 0, grid_bytes, stream),
              "cuMemsetD8Async"))
        return e;
      if (lists.rows > 0)
        if (llvm::Error e =
                grid.launch(BlockMapGeometry::grid_launch(lists.rows), stream, grid_args))
          return e;
    }
    if (map.tiles > 0)
      if (llvm::Error e = kinds.launch(map.kinds_launch(), stream, kinds_args)) return e;
    if (llvm::Error e = list.launch(map.list_launch(), stream, list_args)) return e;
    if (!with_runs || map.tiles == 0) return llvm::Error::success();
    void *runs_args[] = {&params};
    return runs->launch(map.runs_launch(), stream, runs_args);
  };
  if (!reuse_key.empty() && !mask) {
    auto kept = reusable_block_map(reuse_key, bytes, stream, [&](CUdeviceptr workspace) {
      bind(workspace);
      return enqueue(workspace);
    });
    if (!kept) return kept.takeError();
    if (*kept) {
      bind(*kept);
      return CUdeviceptr(0);
    }
  }
  auto allocated = allocate_workspace(kinds.device(), bytes, stream);
  if (!allocated)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the mask_mod's block map of {0} bytes could not be allocated: {1}",
                      bytes, llvm::toString(allocated.takeError()))
            .str());
  const CUdeviceptr workspace = *allocated;
  bind(workspace);
  if (llvm::Error e = enqueue(workspace))
    return llvm::joinErrors(std::move(e), free_workspace(workspace, stream));
  return workspace;
}

}  // namespace flashjit
