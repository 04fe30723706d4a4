#include "tuner/cubin_batch.h"

#include <mutex>

#include "runtime/kernel_source.h"
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

std::vector<CubinResult> cubins_for(llvm::ArrayRef<KernelSpec> specs, TuningDb *db, int threads,
                                    const std::function<void(const std::string &)> &progress) {
  std::vector<CubinResult> results(specs.size());
  if (specs.empty()) return results;
  CompileProgress counter(specs.size(), progress);
  llvm::ThreadPool pool(llvm::hardware_concurrency(threads > 0 ? unsigned(threads) : 0));
  for (size_t i = 0; i < specs.size(); ++i) {
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
  return results;
}

}  // namespace flashjit
