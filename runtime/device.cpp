#include "runtime/device.h"


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

llvm::Expected<DeviceInfo> query_device(int ordinal) {
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

  // Retained once and never released: the primary context is shared with the
  // CUDA runtime and PyTorch, and releasing it at exit would race their own
  // teardown. The retain is process-wide; making it current is per thread.
  struct Primary {
    CUcontext context = nullptr;
    CUdevice device = 0;
    std::string error;
  };
  static const Primary primary = [&cu] {
    Primary p;
    CUresult r = cu.cuDeviceGet(&p.device, 0);
    if (r == CUDA_SUCCESS) r = cu.cuDevicePrimaryCtxRetain(&p.context, p.device);
    if (r != CUDA_SUCCESS)
      p.error = "no current CUDA context and the primary context of device 0 is unavailable: " +
                llvm::toString(cuda_check(r, "cuDevicePrimaryCtxRetain"));
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
