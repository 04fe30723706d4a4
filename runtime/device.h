// The GPU in hand: what the generator and the tuner need to know of it, and
// the CUDA context kernels load into.
#pragma once

#include <cuda.h>

#include <string>

#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  int sm_count = 0;
  int max_smem_per_block_optin = 0;  // bytes
  int max_smem_per_sm = 0;           // bytes
  int l2_bytes = 0;
  int driver_version = 0;  // e.g. 13000
  size_t total_memory = 0;

  TargetArch target() const { return TargetArch::for_device(cc_major, cc_minor); }
};

struct CudaDriver;

llvm::Expected<int> device_count();

// The driver (loaded on first use) and device `ordinal` of it; the error says
// how many devices this process sees.
struct DriverDevice {
  const CudaDriver *driver = nullptr;
  CUdevice device = 0;
};
llvm::Expected<DriverDevice> driver_device(int ordinal);

// The primary context of `device`, retained once per device and process and
// never released: it is shared with the CUDA runtime and PyTorch, and
// releasing it at exit would race their teardown. Not made current.
llvm::Expected<CUcontext> retained_primary_context(const CudaDriver &cu, CUdevice device);

llvm::Expected<DeviceInfo> query_device(int ordinal);

// query_device, once per device and process: attribute queries cost
// microseconds each, and the launch paths ask on every call.
llvm::Expected<DeviceInfo> cached_device_info(int ordinal);

// The caller's current context; where there is none, the primary context of
// device 0 (the one the CUDA runtime and PyTorch use), made current.
struct ContextInfo {
  CUcontext context = nullptr;
  CUdevice device = 0;
};
llvm::Expected<ContextInfo> current_or_primary_context();

}  // namespace flashjit
