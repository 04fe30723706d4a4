// Process-wide counters behind flashjit::runtime_stats(), bumped where the
// work happens (compile, module load, launch) so every caller is counted:
// the public API, the CLI and the tuner alike. The times say where a fresh
// process's first call goes (bench/first_call.py prints them): a warm class
// costs none of them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace flashjit {

struct RuntimeCounters {
  std::atomic<uint64_t> compiles{0};
  std::atomic<uint64_t> module_loads{0};
  std::atomic<uint64_t> launches{0};
  std::atomic<uint64_t> compile_ns{0};        // NVRTC compiles
  std::atomic<uint64_t> compiler_wait_ns{0};  // callers waiting for NVRTC to load
  std::atomic<uint64_t> database_ns{0};       // opening the database, reading rows
  std::atomic<uint64_t> module_load_ns{0};    // cuModuleLoadData and the attributes
};

RuntimeCounters &runtime_counters();

// Adds the time from construction to destruction to one of the counters.
class PhaseTimer {
 public:
  explicit PhaseTimer(std::atomic<uint64_t> &total)
      : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~PhaseTimer() {
    const auto elapsed = std::chrono::steady_clock::now() - start_;
    total_.fetch_add(
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
        std::memory_order_relaxed);
  }
  PhaseTimer(const PhaseTimer &) = delete;
  PhaseTimer &operator=(const PhaseTimer &) = delete;

 private:
  std::atomic<uint64_t> &total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace flashjit
