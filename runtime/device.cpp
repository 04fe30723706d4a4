#include "runtime/device.h"

#include <map>
#include <mutex>
#include <string>

#include "runtime/cuda_driver.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

llvm::Expected<int> device_count() {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  int count = 0;
  if (llvm::Error e = cuda_check(driver->cuDeviceGetCount(&count), "cuDeviceGetCount"))
    return e;
  return count;
}

llvm::Expected<DriverDevice> driver_device(int ordinal) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;
  CUdevice device = 0;
  if (CUresult r = cu.cuDeviceGet(&device, ordinal); r != CUDA_SUCCESS) {
    int count = 0;
    cu.cuDeviceGetCount(&count);
    return llvm::joinErrors(
        llvm::createStringError(llvm::inconvertibleErrorCode(),
                                llvm::formatv("no CUDA device {0} (this process sees {1})",
                                              ordinal, count)
                                    .str()),
        cuda_check(r, "cuDeviceGet"));
  }
  return DriverDevice{&cu, device};
}

llvm::Expected<CUcontext> retained_primary_context(const CudaDriver &cu, CUdevice device) {
  static std::mutex mutex;
  static auto *contexts = new std::map<CUdevice, CUcontext>;
  std::lock_guard lock(mutex);
  auto it = contexts->find(device);
  if (it != contexts->end()) return it->second;
  CUcontext context = nullptr;
  if (llvm::Error e = cuda_check(cu.cuDevicePrimaryCtxRetain(&context, device),
                                 "cuDevicePrimaryCtxRetain"))
    return e;
  contexts->emplace(device, context);
  return context;
}

llvm::Expected<DeviceInfo> query_device(int ordinal) {
  auto found = driver_device(ordinal);
  if (!found) return found.takeError();
  const CudaDriver &cu = *found->driver;
  const CUdevice device = found->device;

  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  if (llvm::Error e = cuda_check(cu.cuDeviceGetName(name, sizeof(name) - 1, device),
                                 "cuDeviceGetName"))
    return e;
  info.name = name;

  struct Attribute {
    CUdevice_attribute attribute;
    int *out;
    const char *what;
  };
  const Attribute attributes[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.cc_major, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.cc_minor, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.sm_count, "SM count"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.max_smem_per_block_optin,
       "opt-in shared memory per block"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &info.max_smem_per_sm,
       "shared memory per SM"},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, &info.l2_bytes, "L2 size"},
  };
  for (const Attribute &a : attributes) {
    if (CUresult r = cu.cuDeviceGetAttribute(a.out, a.attribute, device); r != CUDA_SUCCESS)
      return cuda_check(r, llvm::formatv("cuDeviceGetAttribute({0}) of device {1}", a.what,
                                         ordinal)
                               .str()
                               .c_str());
  }
  if (llvm::Error e =
          cuda_check(cu.cuDriverGetVersion(&info.driver_version), "cuDriverGetVersion"))
    return e;
  if (llvm::Error e =
          cuda_check(cu.cuDeviceTotalMem(&info.total_memory, device), "cuDeviceTotalMem"))
    return e;
  return info;
}

llvm::Expected<DeviceInfo> cached_device_info(int ordinal) {
  static std::mutex mutex;
  static auto *infos = new std::map<int, DeviceInfo>;  // never destroyed: used until exit
  std::lock_guard lock(mutex);
  if (auto it = infos->find(ordinal); it != infos->end()) return it->second;
  auto info = query_device(ordinal);
  if (!info) return info.takeError();
  infos->emplace(ordinal, *info);
  return *info;
}

llvm::Expected<ContextInfo> current_or_primary_context() {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;

  ContextInfo info;
  if (llvm::Error e = cuda_check(cu.cuCtxGetCurrent(&info.context), "cuCtxGetCurrent"))
    return e;
  if (info.context) {
    if (llvm::Error e = cuda_check(cu.cuCtxGetDevice(&info.device), "cuCtxGetDevice"))
      return e;
    return info;
  }

  // The retain (retained_primary_context) is process-wide, and so is its
  // outcome here; making it current is per thread.
  struct Primary {
    CUcontext context = nullptr;
    CUdevice device = 0;
    std::string error;
  };
  static const Primary primary = [&cu] {
    const char *unavailable =
        "no current CUDA context and the primary context of device 0 is unavailable: ";
    Primary p;
    if (CUresult r = cu.cuDeviceGet(&p.device, 0); r != CUDA_SUCCESS) {
      p.error = unavailable + llvm::toString(cuda_check(r, "cuDeviceGet"));
      return p;
    }
    auto context = retained_primary_context(cu, p.device);
    if (context)
      p.context = *context;
    else
      p.error = unavailable + llvm::toString(context.takeError());
    return p;
  }();
  if (!primary.error.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(), primary.error);
  if (llvm::Error e = cuda_check(cu.cuCtxSetCurrent(primary.context), "cuCtxSetCurrent"))
    return e;
  info.context = primary.context;
  info.device = primary.device;
  return info;
}

}  // namespace flashjit
