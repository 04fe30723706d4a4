// Cubins for many kernel specs at once (either pass), through runtime's kernel_cubin on
// llvm::ThreadPool workers: those already in the database's cubin store are
// read from it, the rest compiled with NVRTC in parallel (NVRTC is
// thread-safe; TuningDb serialises its own handle) and stored.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/kernel_spec.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit {

struct CubinResult {
  std::string key;  // in the cubin store (runtime/tuning_key.h cubin_key)
  std::string entry;
  std::vector<char> bytes;  // empty when `error` is set
  bool from_store = false;  // false: compiled now
  double compile_ms = 0;    // of this compile (0 when read from the store)
  std::string error;        // the NVRTC failure, with its log
};

// Counts finished compiles of a batch and tells `progress` (optional)
// "compiled N/M" or "loaded N/M" (read from the store); thread-safe.
class CompileProgress {
 public:
  CompileProgress(size_t total, const std::function<void(const std::string &)> &progress)
      : total_(total), progress_(progress) {}
  void finished(const CubinResult &r);

 private:
  std::mutex mutex_;
  size_t done_ = 0;
  const size_t total_;
  const std::function<void(const std::string &)> &progress_;
};

// Specs of one kernel (decode candidates that differ only in their split
// count, a launch parameter) compile once: `unique` holds the first spec of
// each kernel ID, and copy_to_duplicates gives the others its result, as
// served by the cubin store.
struct DistinctKernels {
  std::vector<size_t> unique;
  std::vector<size_t> first_of;  // per spec: the index of its kernel's first spec
  static DistinctKernels of(llvm::ArrayRef<KernelSpec> specs);
  void copy_to_duplicates(std::vector<CubinResult> &results) const;
};

// One result per spec, in order; a spec that does not compile gets its error
// and never stops the others. `threads` 0: hardware concurrency. `progress`
// (optional) hears "compiled N/M" as each finishes.
std::vector<CubinResult> cubins_for(llvm::ArrayRef<KernelSpec> specs, TuningDb *db, int threads,
                                    const std::function<void(const std::string &)> &progress = {});

}  // namespace flashjit
