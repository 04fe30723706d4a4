// The block maps (forward and backward) that depend on nothing but the
// call's shape and its scalar aux values, kept for the process and reused
// by later calls, across a model's layers: a mask_mod declared a function
// of (q, k) alone whose aux
// holds no pointer, e.g. a sliding window with sinks, prefix-LM, causal as
// a mask_mod. Its classification calls mask_mod on every (query, key) pair,
// 64M calls at 8k x 8k, ~40 us a call on the H200 (12% of a window-with-
// sinks forward at d = 128). A map that reads device data (a document
// mask's ids, a caller's block mask) is built per call: its contents may
// change between calls while the pointer stays. Each new key builds its map
// and synchronises the stream once, so a scalar that changes every call
// (a prefix length per batch) pays that until the cap below, then builds
// per call. The forward's and the backward's maps alike: a profile of one
// d = 128 8k call (H200, 2026-12-04) measured the backward of a
// window with sinks at 1319 us kept against 1381 built per call, causal as
// a mask_mod 2849 against 2900.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct BlockMapGeometry;
struct Modifiers;
struct Problem;

// At most this many maps, and this many bytes of them, per process; past
// either, maps are built per call.
constexpr int kReusableBlockMapsMax = 64;
constexpr uint64_t kReusableBlockMapBytesMax = 256ull << 20;

// The key of the map of the program `kernel_id` (KernelSpec::id(), a
// forward's or a backward's; "" for none) compiled with `modifiers`, for
// `problem` with the aux struct `aux` (the params' aux, 64 bytes), or ""
// where the map cannot be reused: one per batch or head, a caller's block
// mask, a pointer among the aux fields, no mask_mod_qk_only.
std::string reusable_block_map_key(const std::string &kernel_id, const Modifiers &modifiers,
                                   const Problem &problem, const unsigned long long (&aux)[8],
                                   bool caller_block_mask, const BlockMapGeometry &map);

// The workspace of the map under `key` in the current context: the one
// kept, or a new one of `bytes` that `build` fills (enqueues the map's
// kernels into on `stream`), after which `stream` is synchronised, so the
// kept map is complete for every later call on any stream. 0 where the map
// is not kept: the cache is full, or `stream` is capturing a graph (which
// a synchronisation would break) and no map is kept yet; the caller then
// builds one for the call. The memory lives as long as the process.
llvm::Expected<CUdeviceptr> reusable_block_map(const std::string &key, uint64_t bytes,
                                               CUstream stream,
                                               llvm::function_ref<llvm::Error(CUdeviceptr)> build);

}  // namespace flashjit
