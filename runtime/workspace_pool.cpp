#include "runtime/workspace_pool.h"

#include <map>
#include <mutex>

#include "runtime/cuda_driver.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

// One pool per device, created on first use and kept for the process.
llvm::Expected<CUmemoryPool> device_pool(const CudaDriver &cu, CUdevice device) {
  static std::mutex mutex;
  static auto *pools = new std::map<CUdevice, CUmemoryPool>;  // outlives static destructors
  std::lock_guard lock(mutex);
  if (auto it = pools->find(device); it != pools->end()) return it->second;
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = static_cast<int>(device);
  CUmemoryPool pool = nullptr;
  if (llvm::Error e = cuda_check(cu.cuMemPoolCreate(&pool, &props), "cuMemPoolCreate"))
    return e;
  cuuint64_t retained = kRetainedWorkspaceBytes;
  if (llvm::Error e = cuda_check(
          cu.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &retained),
          "cuMemPoolSetAttribute(RELEASE_THRESHOLD)"))
    return e;
  pools->emplace(device, pool);
  return pool;
}

}  // namespace

llvm::Expected<CUdeviceptr> allocate_workspace(CUdevice device, uint64_t bytes, CUstream stream) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  auto pool = device_pool(*driver, device);
  if (!pool) return pool.takeError();
  CUdeviceptr ptr = 0;
  if (llvm::Error e = cuda_check(driver->cuMemAllocFromPoolAsync(&ptr, bytes, *pool, stream),
                                 "cuMemAllocFromPoolAsync"))
    return e;
  return ptr;
}

llvm::Error free_workspace(CUdeviceptr ptr, CUstream stream) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  return cuda_check(driver->cuMemFreeAsync(ptr, stream), "cuMemFreeAsync");
}

}  // namespace flashjit
