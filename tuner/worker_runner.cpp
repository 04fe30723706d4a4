#include "tuner/worker_runner.h"

#include "tuner/worker_protocol.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace wp = worker_protocol;

WorkerRunner::WorkerRunner(const std::string &binary, const std::string &db_path,
                           llvm::json::Object setup, const WorkerTimeouts &timeouts)
    : process_(binary, {"worker", "--db=" + db_path}, std::move(setup), timeouts.setup_s),
      timeouts_(timeouts) {}

llvm::Expected<std::unique_ptr<WorkerRunner>> WorkerRunner::make(
    const std::string &binary, const std::string &db_path, Pass pass, const Problem &problem,
    const std::optional<PackedBatch> &packed, int device, const WorkerTimeouts &timeouts,
    const TunedModifiers &modifiers) {
  llvm::json::Object setup{{"op", "setup"},
                           {"pass", to_string(pass)},
                           {"problem", wp::problem_to_json(problem)},
                           {"device", device}};
  if (packed) setup["packed"] = wp::packed_batch_to_json(*packed);
  if (!modifiers.empty()) {
    setup["modifiers"] = wp::modifiers_to_json(modifiers.modifiers);
    llvm::json::Array values;
    for (const std::string &value : modifiers.aux_values) values.push_back(value);
    setup["aux_values"] = std::move(values);
  }
  std::unique_ptr<WorkerRunner> runner(
      new WorkerRunner(binary, db_path, std::move(setup), timeouts));
  // A ping starts the first worker and runs its setup: a worker that cannot
  // start or set up at all is the tune's error, not every candidate's.
  auto reply = runner->process_.request(llvm::json::Object{{"op", "ping"}}, timeouts.setup_s,
                                        "starting");
  if (!reply)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "the measuring worker did not start: " +
                                       llvm::toString(reply.takeError()));
  runner->input_sets_ =
      int(runner->process_.setup_reply().getInteger("input_sets").getValueOr(0));
  return runner;
}

llvm::Expected<llvm::json::Object> WorkerRunner::request(llvm::json::Object request,
                                                         double timeout_s,
                                                         llvm::StringRef doing) {
  auto reply = process_.request(request, timeout_s, doing);
  if (reply) count_worker_compiles(*reply);
  return reply;
}

llvm::Expected<LoadedCandidate> WorkerRunner::load(int index, const KernelSpec &spec,
                                                   const CubinResult &) {
  specs_[index] = spec;
  loaded_in_.erase(index);
  auto reply = request(llvm::json::Object{{"op", "load"},
                                          {"candidate", index},
                                          {"spec", wp::spec_to_json(spec)}},
                       timeouts_.compile_s, "loading");
  if (!reply) return reply.takeError();
  loaded_in_[index] = process_.generation();
  LoadedCandidate out;
  out.registers = int(reply->getInteger("registers").getValueOr(0));
  out.spill_bytes = int(reply->getInteger("spill_bytes").getValueOr(0));
  out.static_smem_bytes = int(reply->getInteger("static_smem_bytes").getValueOr(0));
  out.dynamic_smem_bytes = int(reply->getInteger("dynamic_smem_bytes").getValueOr(0));
  out.occupancy = int(reply->getInteger("occupancy").getValueOr(0));
  out.rejected = reply->getString("rejected").getValueOr("").str();
  return out;
}

llvm::Error WorkerRunner::ensure_loaded(int index) {
  auto spec = specs_.find(index);
  if (spec == specs_.end())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   llvm::formatv("candidate {0} is not loaded", index).str());
  auto in = loaded_in_.find(index);
  if (process_.running() && in != loaded_in_.end() && in->second == process_.generation())
    return llvm::Error::success();
  auto loaded = load(index, spec->second, CubinResult{});
  if (!loaded) return loaded.takeError();
  return llvm::Error::success();
}

llvm::Error WorkerRunner::warm_up(int index, double ms) {
  if (llvm::Error e = ensure_loaded(index)) return e;
  auto reply = request(llvm::json::Object{{"op", "warm_up"}, {"candidate", index}, {"ms", ms}},
                       timeouts_.request_s, "warming up");
  return reply ? llvm::Error::success() : reply.takeError();
}

llvm::Expected<Measurement> WorkerRunner::time(int index, int repeats) {
  if (llvm::Error e = ensure_loaded(index)) return e;
  auto reply = request(
      llvm::json::Object{{"op", "time"}, {"candidate", index}, {"repeats", repeats}},
      timeouts_.request_s, "timing");
  if (!reply) return reply.takeError();
  Measurement m;
  m.median_ms = reply->getNumber("median_ms").getValueOr(0);
  m.min_ms = reply->getNumber("min_ms").getValueOr(0);
  m.max_ms = reply->getNumber("max_ms").getValueOr(0);
  return m;
}

llvm::Expected<std::string> WorkerRunner::check(int index) {
  if (llvm::Error e = ensure_loaded(index)) return llvm::toString(std::move(e));
  auto reply = request(llvm::json::Object{{"op", "check"}, {"candidate", index}},
                       timeouts_.compile_s, "checking accuracy");
  if (!reply) return llvm::toString(reply.takeError());
  if (reply->getBoolean("passed").getValueOr(false)) return std::string();
  return reply->getString("why").getValueOr("failed the accuracy check").str();
}

}  // namespace flashjit
