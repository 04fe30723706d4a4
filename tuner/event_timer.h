// CUDA-event timing of back-to-back launches on one stream, for any pass:
// one warm-up launch, one launch to size the samples, then `repeats`
// samples of as many launches as last about kSampleMs each, all enqueued
// before one synchronise (the GPU never idles inside a timed interval).
// The launch is a callback: the forward's is one kernel, the backward's three.
#pragma once

#include <cuda.h>

#include <functional>
#include <vector>

#include "tuner/search.h"
#include "llvm/Support/Error.h"

namespace flashjit {

class EventTimer {
 public:
  EventTimer() = default;
  EventTimer(const EventTimer &) = delete;
  EventTimer &operator=(const EventTimer &) = delete;
  ~EventTimer();

  static constexpr double kSampleMs = 0.25;

  // Per-launch median, min and max in ms. Errors are the launch's or the
  // driver's, unchanged (the caller decides whether the context survived).
  llvm::Expected<Measurement> time(CUstream stream, int repeats,
                                   const std::function<llvm::Error()> &launch);

 private:
  llvm::Error reserve(size_t count);
  std::vector<CUevent> events_;
};

}  // namespace flashjit
