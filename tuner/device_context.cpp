#include "tuner/device_context.h"

#include <utility>

#include "runtime/cuda_driver.h"
#include "runtime/device.h"

namespace flashjit {

llvm::Expected<ScopedDeviceContext> ScopedDeviceContext::make(int ordinal) {
  auto found = driver_device(ordinal);
  if (!found) return found.takeError();
  const CudaDriver &cu = *found->driver;
  const CUdevice device = found->device;

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
