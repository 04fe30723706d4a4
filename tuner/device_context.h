// The context a tune runs in: device N's, current in the calling thread for
// the tune's duration. runtime/device.h falls back to device 0's primary
// context only; tuning device 1..N (one worker thread per GPU) needs its own.
#pragma once

#include <cuda.h>

#include "llvm/Support/Error.h"

namespace flashjit {

// Makes a context of device `ordinal` current in this thread while it lives,
// and restores the thread's previous context (or none) when destroyed. A
// current context already on that device is kept (the caller's, as the
// runtime does); otherwise the device's primary context, the one the CUDA
// runtime and PyTorch share, is retained (once per process, never released)
// and made current.
class ScopedDeviceContext {
 public:
  static llvm::Expected<ScopedDeviceContext> make(int ordinal);

  ScopedDeviceContext(ScopedDeviceContext &&other) noexcept;
  ScopedDeviceContext &operator=(ScopedDeviceContext &&) = delete;
  ScopedDeviceContext(const ScopedDeviceContext &) = delete;
  ~ScopedDeviceContext();

  CUcontext context() const { return context_; }
  CUdevice device() const { return device_; }

 private:
  ScopedDeviceContext() = default;
  CUcontext context_ = nullptr;
  CUdevice device_ = 0;
  CUcontext previous_ = nullptr;
  bool restore_ = false;
};

// Whether the current context has suffered a sticky error (an illegal
// address, a trap): such a context fails every later call, so measuring must
// stop. Synchronises it; success when it still works.
llvm::Error check_context_health();

}  // namespace flashjit
