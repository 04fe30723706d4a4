#include "tuner/cubin_batch.h"

#include <mutex>

#include "runtime/kernel_source.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"

namespace flashjit {

void CompileProgress::finished(const CubinResult &r) {
  std::lock_guard lock(mutex_);
  ++done_;
  if (progress_)
    progress_(llvm::formatv("{0} {1}/{2}", r.from_store ? "loaded" : "compiled", done_, total_)
                  .str());
}

DistinctKernels DistinctKernels::of(llvm::ArrayRef<KernelSpec> specs) {
  DistinctKernels out;
  out.first_of.resize(specs.size());
  llvm::StringMap<size_t> seen;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto [it, inserted] = seen.try_emplace(specs[i].id(), i);
    out.first_of[i] = it->second;
    if (inserted) out.unique.push_back(i);
  }
  return out;
}

void DistinctKernels::copy_to_duplicates(std::vector<CubinResult> &results) const {
  for (size_t i = 0; i < results.size(); ++i) {
    if (first_of[i] == i) continue;
    results[i] = results[first_of[i]];
    if (results[i].error.empty()) {
      results[i].from_store = true;
      results[i].compile_ms = 0;
    }
  }
}

std::vector<CubinResult> cubins_for(llvm::ArrayRef<KernelSpec> specs, TuningDb *db, int threads,
                                    const std::function<void(const std::string &)> &progress) {
  std::vector<CubinResult> results(specs.size());
  if (specs.empty()) return results;
  const DistinctKernels kernels = DistinctKernels::of(specs);
  CompileProgress counter(kernels.unique.size(), progress);
  llvm::ThreadPool pool(llvm::hardware_concurrency(threads > 0 ? unsigned(threads) : 0));
  for (size_t i : kernels.unique) {
    pool.async([&, i] {
      CubinResult &r = results[i];
      auto cubin = kernel_cubin(specs[i], db);
      if (cubin) {
        r.key = std::move(cubin->key);
        r.entry = std::move(cubin->entry);
        r.bytes = std::move(cubin->bytes);
        r.from_store = !cubin->compiled;
        r.compile_ms = cubin->compile_ms;
      } else {
        r.error = llvm::toString(cubin.takeError());
      }
      counter.finished(r);
    });
  }
  pool.wait();
  kernels.copy_to_duplicates(results);
  return results;
}

}  // namespace flashjit
