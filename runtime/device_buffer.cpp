#include "runtime/device_buffer.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error range_error(const char *what, size_t offset, size_t bytes, size_t size) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("{0} of {1} B at offset {2} exceeds the device buffer of {3} B", what, bytes,
                    offset, size)
          .str());
}

void free_device(CUdeviceptr ptr) {
  if (!ptr) return;
  // Ignored for the same reason as module unloads: at exit the driver may
  // already be gone, and a destructor cannot report.
  if (auto driver = cuda_driver())
    driver->cuMemFree(ptr);
  else
    llvm::consumeError(driver.takeError());
}

}  // namespace

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr_(std::exchange(other.ptr_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    free_device(ptr_);
    ptr_ = std::exchange(other.ptr_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { free_device(ptr_); }

llvm::Expected<DeviceBuffer> DeviceBuffer::from_host(const void *host, size_t bytes) {
  auto buffer = allocate(std::max<size_t>(bytes, 16));
  if (!buffer) return buffer.takeError();
  if (bytes > 0)
    if (llvm::Error e = buffer->upload(host, bytes)) return e;
  return std::move(*buffer);
}

llvm::Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  DeviceBuffer buffer;
  if (bytes == 0) return buffer;  // cuMemAlloc rejects 0
  if (CUresult r = driver->cuMemAlloc(&buffer.ptr_, bytes); r != CUDA_SUCCESS) {
    size_t free_bytes = 0, total_bytes = 0;
    driver->cuMemGetInfo(&free_bytes, &total_bytes);
    return llvm::joinErrors(
        llvm::createStringError(llvm::inconvertibleErrorCode(),
                                llvm::formatv("cannot allocate {0} B of device memory ({1} B of "
                                              "{2} B free)",
                                              bytes, free_bytes, total_bytes)
                                    .str()),
        cuda_check(r, "cuMemAlloc"));
  }
  buffer.bytes_ = bytes;
  return buffer;
}

llvm::Error DeviceBuffer::upload(const void *host, size_t bytes, size_t offset) {
  if (offset > bytes_ || bytes > bytes_ - offset) return range_error("upload", offset, bytes, bytes_);
  if (bytes == 0) return llvm::Error::success();
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  return cuda_check(driver->cuMemcpyHtoD(ptr_ + offset, host, bytes), "cuMemcpyHtoD");
}

llvm::Error DeviceBuffer::download(void *host, size_t bytes, size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    return range_error("download", offset, bytes, bytes_);
  if (bytes == 0) return llvm::Error::success();
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  return cuda_check(driver->cuMemcpyDtoH(host, ptr_ + offset, bytes), "cuMemcpyDtoH");
}

llvm::Error DeviceBuffer::fill_bytes(unsigned char value) {
  if (bytes_ == 0) return llvm::Error::success();
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  // Synchronous with respect to the host (legacy-stream memset semantics), so
  // a poisoned buffer is poisoned before any later launch reads it.
  return cuda_check(driver->cuMemsetD8(ptr_, value, bytes_), "cuMemsetD8");
}

llvm::Expected<Timing> time_on_stream(CUstream stream, int warmup, int repeats,
                                      const std::function<llvm::Error()> &fn) {
  if (repeats < 1)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "time_on_stream needs at least one timed repeat");
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;

  for (int i = 0; i < warmup; ++i)
    if (llvm::Error e = fn()) return e;

  // One event pair per run, all recorded before a single synchronise: no host
  // round trip between runs, so launch latency does not leak into the timing
  // of short kernels the way a per-run sync would make it.
  std::vector<CUevent> events;
  auto destroy = llvm::make_scope_exit([&] {
    for (CUevent e : events) cu.cuEventDestroy(e);
  });
  for (int i = 0; i < 2 * repeats; ++i) {
    CUevent event = nullptr;
    if (llvm::Error e = cuda_check(cu.cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"))
      return e;
    events.push_back(event);
  }
  for (int i = 0; i < repeats; ++i) {
    if (llvm::Error e = cuda_check(cu.cuEventRecord(events[2 * i], stream), "cuEventRecord"))
      return e;
    if (llvm::Error e = fn()) return e;
    if (llvm::Error e = cuda_check(cu.cuEventRecord(events[2 * i + 1], stream), "cuEventRecord"))
      return e;
  }
  if (llvm::Error e =
          cuda_check(cu.cuEventSynchronize(events.back()), "cuEventSynchronize (timed runs)"))
    return e;

  std::vector<double> ms(repeats);
  for (int i = 0; i < repeats; ++i) {
    float elapsed = 0;
    if (llvm::Error e = cuda_check(cu.cuEventElapsedTime(&elapsed, events[2 * i], events[2 * i + 1]),
                                   "cuEventElapsedTime"))
      return e;
    ms[i] = elapsed;
  }
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
  return t;
}

}  // namespace flashjit
