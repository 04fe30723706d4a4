#include "runtime/block_map_cache.h"

#include <mutex>
#include <shared_mutex>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "generator/block_map.h"
#include "llvm/ADT/StringMap.h"
#include "runtime/cuda_driver.h"

namespace flashjit {

namespace {

struct KeptMaps {
  std::shared_mutex mutex;
  llvm::StringMap<CUdeviceptr> maps;  // by context and key
  uint64_t bytes = 0;
};

KeptMaps &kept_maps() {
  static KeptMaps *maps = new KeptMaps;  // never destroyed: its memory outlives static teardown
  return *maps;
}

}  // namespace

std::string reusable_block_map_key(const std::string &kernel_id, const Modifiers &modifiers,
                                   const Problem &problem, const unsigned long long (&aux)[8],
                                   bool caller_block_mask, const BlockMapGeometry &map) {
  if (kernel_id.empty() || caller_block_mask || modifiers.mask_mod_qk_only != MaskModQkOnly::on ||
      map.heads != 1 || map.batches != 1 || map.rows() == 0)
    return "";
  for (const AuxField &field : modifiers.aux)
    if (field.type.find('*') != std::string::npos) return "";
  // The map reads the lengths, the built-in window and the aux values
  // besides what the kernel's id holds (tiles, mask kind, the snippets):
  // their bytes after the id, no formatting (every such call builds a key).
  const int64_t shape[] = {problem.seqlen_q, problem.seqlen_k, problem.window_left,
                           problem.window_right, problem.attention_chunk};
  std::string key = kernel_id;
  key.push_back('|');
  key.append(reinterpret_cast<const char *>(shape), sizeof(shape));
  key.append(reinterpret_cast<const char *>(aux), sizeof(aux));
  return key;
}

llvm::Expected<CUdeviceptr> reusable_block_map(
    const std::string &key, uint64_t bytes, CUstream stream,
    llvm::function_ref<llvm::Error(CUdeviceptr)> build) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  CUcontext context = nullptr;
  if (llvm::Error e = cuda_check(driver->cuCtxGetCurrent(&context), "cuCtxGetCurrent"))
    return e;
  std::string full_key(reinterpret_cast<const char *>(&context), sizeof(context));
  full_key += key;
  KeptMaps &kept = kept_maps();
  {
    // Every later call of a kept map: a shared lock.
    std::shared_lock<std::shared_mutex> lock(kept.mutex);
    if (auto found = kept.maps.find(full_key); found != kept.maps.end()) return found->second;
  }
  // Held across a build: a second caller of the same key waits for the
  // first's map instead of building its own (and finds it below).
  std::unique_lock<std::shared_mutex> lock(kept.mutex);
  if (auto found = kept.maps.find(full_key); found != kept.maps.end()) return found->second;
  if (kept.maps.size() >= size_t(kReusableBlockMapsMax) ||
      kept.bytes + bytes > kReusableBlockMapBytesMax)
    return CUdeviceptr(0);
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  if (llvm::Error e =
          cuda_check(driver->cuStreamIsCapturing(stream, &capture), "cuStreamIsCapturing"))
    return e;
  if (capture != CU_STREAM_CAPTURE_STATUS_NONE) return CUdeviceptr(0);
  CUdeviceptr workspace = 0;
  if (llvm::Error e = cuda_check(driver->cuMemAlloc(&workspace, bytes), "cuMemAlloc"))
    return e;
  llvm::Error built = build(workspace);
  // After a failed enqueue too: what it did launch is then done with the
  // memory, which goes back. A failed synchronisation (a faulted context)
  // leaves the memory to the context.
  llvm::Error synced = cuda_check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
  if (built || synced) {
    if (!synced) driver->cuMemFree(workspace);
    return llvm::joinErrors(std::move(built), std::move(synced));
  }
  kept.maps[full_key] = workspace;
  kept.bytes += bytes;
  return workspace;
}

}  // namespace flashjit
