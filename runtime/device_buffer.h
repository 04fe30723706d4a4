// Device memory owned RAII-style, for the CLI, the tests and the tuner (the
// library itself never allocates: callers pass their own pointers).
#pragma once

#include <cuda.h>

#include <cstddef>
#include <functional>

#include "llvm/Support/Error.h"

namespace flashjit {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  ~DeviceBuffer();

  static llvm::Expected<DeviceBuffer> allocate(size_t bytes);
  // A new buffer holding `bytes` of `host`: at least 16 bytes, so that an
  // empty array (a batch without keys, no pages) still has an address the
  // argument checks accept.
  static llvm::Expected<DeviceBuffer> from_host(const void *host, size_t bytes);

  CUdeviceptr address() const { return ptr_; }
  void *data() const { return reinterpret_cast<void *>(ptr_); }
  size_t size() const { return bytes_; }

  llvm::Error upload(const void *host, size_t bytes, size_t offset = 0);
  llvm::Error download(void *host, size_t bytes, size_t offset = 0) const;
  llvm::Error fill_bytes(unsigned char value);  // e.g. 0xFF poisons with NaN

 private:
  CUdeviceptr ptr_ = 0;
  size_t bytes_ = 0;
};

// Times `fn` (which enqueues work on `stream`) with CUDA events: `warmup`
// untimed runs, then the median of `repeats` timed runs, in milliseconds.
struct Timing {
  double median_ms = 0;
  double min_ms = 0;
  double max_ms = 0;
};
llvm::Expected<Timing> time_on_stream(CUstream stream, int warmup, int repeats,
                                      const std::function<llvm::Error()> &fn);

}  // namespace flashjit
