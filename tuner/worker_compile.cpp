#include "tuner/worker_compile.h"

#include <atomic>
#include <thread>

#include "tuner/worker_process.h"
#include "tuner/worker_protocol.h"
#include "llvm/Support/Threading.h"

namespace flashjit {

std::vector<CubinResult> cubins_in_workers(
    llvm::ArrayRef<KernelSpec> specs, llvm::ArrayRef<int> candidates, const std::string &binary,
    const std::string &db_path, int threads, double timeout_s,
    const std::function<void(const std::string &)> &progress) {
  std::vector<CubinResult> results(specs.size());
  if (specs.empty()) return results;
  const DistinctKernels kernels = DistinctKernels::of(specs);
  const std::vector<size_t> &unique = kernels.unique;
  const size_t pool = std::min<size_t>(
      unique.size(), llvm::hardware_concurrency(threads > 0 ? unsigned(threads) : 0).compute_thread_count());
  std::atomic<size_t> next{0};
  CompileProgress counter(unique.size(), progress);
  auto compile_loop = [&] {
    WorkerProcess worker(binary, {"worker", "--db=" + db_path});
    for (size_t u = next++; u < unique.size(); u = next++) {
      const size_t i = unique[u];
      CubinResult &r = results[i];
      const int candidate = i < candidates.size() ? candidates[i] : int(i);
      auto reply = worker.request(
          llvm::json::Object{{"op", "compile"},
                             {"candidate", candidate},
                             {"spec", worker_protocol::spec_to_json(specs[i])}},
          timeout_s, "compiling");
      if (reply) {
        count_worker_compiles(*reply);
        r.key = reply->getString("cubin_key").getValueOr("").str();
        r.entry = reply->getString("entry").getValueOr("").str();
        r.from_store = reply->getBoolean("from_store").getValueOr(false);
        r.compile_ms = reply->getNumber("compile_ms").getValueOr(0);
      } else {
        r.error = llvm::toString(reply.takeError());
      }
      counter.finished(r);
    }
  };
  std::vector<std::thread> workers;
  for (size_t t = 0; t < pool; ++t) workers.emplace_back(compile_loop);
  for (std::thread &t : workers) t.join();
  kernels.copy_to_duplicates(results);
  return results;
}

}  // namespace flashjit
