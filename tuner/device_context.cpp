#include "tuner/device_context.h"

#include <map>
#include <mutex>
#include <utility>

#include "runtime/cuda_driver.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

// Retained once per device and never released, as runtime/device.cpp does for
// device 0: the primary context is shared with the CUDA runtime and PyTorch,
// and releasing it at exit would race their teardown.
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

}  // namespace

llvm::Expected<ScopedDeviceContext> ScopedDeviceContext::make(int ordinal) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;

  CUdevice device = 0;
  if (CUresult r = cu.cuDeviceGet(&device, ordinal); r != CUDA_SUCCESS) {
    int count = 0;
    cu.cuDeviceGetCount(&count);
    return llvm::joinErrors(
        llvm::createStringError(
            llvm::inconvertibleErrorCode(),
            llvm::formatv("no CUDA device {0} (this process sees {1})", ordinal, count).str()),
        cuda_check(r, "cuDeviceGet"));
  }

  ScopedDeviceContext scope;
  scope.device_ = device;
  if (llvm::Error e = cuda_check(cu.cuCtxGetCurrent(&scope.previous_), "cuCtxGetCurrent"))
    return e;
  if (scope.previous_) {
    CUdevice current = 0;
    if (llvm::Error e = cuda_check(cu.cuCtxGetDevice(&current), "cuCtxGetDevice")) return e;
    if (current == device) {
      scope.context_ = scope.previous_;
      return scope;  // nothing to switch, nothing to restore
    }
  }
  auto primary = retained_primary_context(cu, device);
  if (!primary) return primary.takeError();
  if (llvm::Error e = cuda_check(cu.cuCtxSetCurrent(*primary), "cuCtxSetCurrent")) return e;
  scope.context_ = *primary;
  scope.restore_ = true;
  return scope;
}

ScopedDeviceContext::ScopedDeviceContext(ScopedDeviceContext &&other) noexcept
    : context_(other.context_),
      device_(other.device_),
      previous_(other.previous_),
      restore_(std::exchange(other.restore_, false)) {}

ScopedDeviceContext::~ScopedDeviceContext() {
  if (!restore_) return;
  // Restoring may fail only if the driver is gone (exit); nothing to report.
  if (auto driver = cuda_driver())
    driver->cuCtxSetCurrent(previous_);
  else
    llvm::consumeError(driver.takeError());
}

llvm::Error check_context_health() {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  return cuda_check(driver->cuCtxSynchronize(), "cuCtxSynchronize");
}

}  // namespace flashjit
