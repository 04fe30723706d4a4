// Process-wide counters behind flashjit::runtime_stats(), bumped where the
// work happens (compile, module load, launch) so every caller is counted:
// the public API, the CLI and the tuner alike.
#pragma once

#include <atomic>
#include <cstdint>

namespace flashjit {

struct RuntimeCounters {
  std::atomic<uint64_t> compiles{0};
  std::atomic<uint64_t> module_loads{0};
  std::atomic<uint64_t> launches{0};
};

RuntimeCounters &runtime_counters();

}  // namespace flashjit
