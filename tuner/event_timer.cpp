#include "tuner/event_timer.h"

#include <algorithm>
#include <cmath>

#include "runtime/cuda_driver.h"

namespace flashjit {

EventTimer::~EventTimer() {
  auto driver = cuda_driver();
  if (!driver) {
    llvm::consumeError(driver.takeError());
    return;
  }
  for (CUevent e : events_) driver->cuEventDestroy(e);
}

llvm::Error EventTimer::reserve(size_t count) {
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  while (events_.size() < count) {
    CUevent event = nullptr;
    if (llvm::Error e =
            cuda_check(driver->cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"))
      return e;
    events_.push_back(event);
  }
  return llvm::Error::success();
}

llvm::Expected<Measurement> EventTimer::time(CUstream stream, int repeats,
                                             const std::function<llvm::Error()> &launch) {
  if (repeats < 1)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "at least one timed repeat is needed");
  auto driver = cuda_driver();
  if (!driver) return driver.takeError();
  const CudaDriver &cu = *driver;
  if (llvm::Error e = reserve(size_t(repeats) + 1)) return e;

  // Warm-up (first touch of the modules, instruction cache), then one timed
  // launch to size the samples.
  if (llvm::Error e = launch()) return e;
  if (llvm::Error e = cuda_check(cu.cuEventRecord(events_[0], stream), "cuEventRecord")) return e;
  if (llvm::Error e = launch()) return e;
  if (llvm::Error e = cuda_check(cu.cuEventRecord(events_[1], stream), "cuEventRecord")) return e;
  if (llvm::Error e = cuda_check(cu.cuEventSynchronize(events_[1]), "cuEventSynchronize"))
    return e;
  float estimate = 0;
  if (llvm::Error e = cuda_check(cu.cuEventElapsedTime(&estimate, events_[0], events_[1]),
                                 "cuEventElapsedTime"))
    return e;
  const int per_sample =
      std::clamp(int(std::ceil(kSampleMs / std::max(double(estimate), 1e-4))), 1, 64);

  for (int i = 0; i < repeats; ++i) {
    if (llvm::Error e = cuda_check(cu.cuEventRecord(events_[i], stream), "cuEventRecord"))
      return e;
    for (int j = 0; j < per_sample; ++j)
      if (llvm::Error e = launch()) return e;
  }
  if (llvm::Error e = cuda_check(cu.cuEventRecord(events_[repeats], stream), "cuEventRecord"))
    return e;
  if (llvm::Error e = cuda_check(cu.cuEventSynchronize(events_[repeats]), "cuEventSynchronize"))
    return e;

  std::vector<double> ms(repeats);
  for (int i = 0; i < repeats; ++i) {
    float elapsed = 0;
    if (llvm::Error e = cuda_check(cu.cuEventElapsedTime(&elapsed, events_[i], events_[i + 1]),
                                   "cuEventElapsedTime"))
      return e;
    ms[i] = double(elapsed) / per_sample;
  }
  std::sort(ms.begin(), ms.end());
  Measurement m;
  m.min_ms = ms.front();
  m.max_ms = ms.back();
  m.median_ms = repeats % 2 ? ms[repeats / 2] : 0.5 * (ms[repeats / 2 - 1] + ms[repeats / 2]);
  return m;
}

}  // namespace flashjit
