#include "runtime/launch_forward.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "generator/forward_params.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "runtime/tensor_maps.h"
#include "runtime/call_key.h"
#include "runtime/kernel_source.h"
#include "runtime/tensor_checks.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

llvm::Error with_context(const Problem &problem, llvm::Error error) {
  return with_call_context("forward", problem, std::move(error));
}


struct Plan {
  KernelSpec spec;
  const LoadedKernel *kernel;
};

class PlanCache {
 public:
  const Plan *find(const CallKey &key) const {
    std::shared_lock lock(mutex_);
    auto it = plans_.find(key);
    return it == plans_.end() ? nullptr : &it->second;
  }
  const Plan *insert(const CallKey &key, Plan plan) {
    std::unique_lock lock(mutex_);
    return &plans_.try_emplace(key, std::move(plan)).first->second;
  }
  static PlanCache &process() {
    static auto *cache = new PlanCache;  // outlives every static destructor
    return *cache;
  }

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<CallKey, Plan, CallKeyHash> plans_;  // nodes are stable
};

}  // namespace

llvm::Error validate_forward_args(const Problem &problem, const ForwardArgs &args) {
  const TensorCheck tensors[] = {
      {"q", args.q, args.q_strides, problem.batch, problem.seqlen_q, problem.heads_q},
      {"k", args.k, args.k_strides, problem.batch, problem.seqlen_k, problem.heads_kv},
      {"v", args.v, args.v_strides, problem.batch, problem.seqlen_k, problem.heads_kv},
      {"o", args.o, args.o_strides, problem.batch, problem.seqlen_q, problem.heads_q},
  };
  // The LSE output is optional.
  const PointerCheck lse[] = {{"lse", args.lse, alignof(float)}};
  return check_tensors(tensors, args.lse ? llvm::ArrayRef<PointerCheck>(lse)
                                         : llvm::ArrayRef<PointerCheck>());
}

llvm::Expected<KernelSpec> resolve_forward_spec(const Problem &problem,
                                                const KernelConfig &config) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  auto device = cached_device_info(int(context->device));  // a CUdevice is its ordinal
  if (!device) return device.takeError();
  // The caller's complete config, else the database's tuning, else the
  // heuristic; a stored config that no longer validates was already passed
  // over, so an error here is the caller's config or the problem.
  auto chosen = choose_forward_config(problem, config, *device, process_tuning_db());
  if (!chosen) return chosen.takeError();
  return make_forward_spec(problem, chosen->config, device->target(),
                           device->max_smem_per_block_optin);
}

llvm::Expected<const LoadedKernel &> get_forward_kernel(const KernelSpec &spec) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  // The ID names every parameter of the compiled code, the architecture
  // included (cubins are arch-specific); the cache adds the context.
  return KernelCache::process().get_or_build(
      spec.id(), context->context,
      [&spec]() -> llvm::Expected<std::unique_ptr<LoadedKernel>> {
        // From the database's cubin store when there (no NVRTC run), else
        // compiled and stored for the next process.
        auto cubin = forward_cubin(spec, process_tuning_db());
        if (!cubin) return cubin.takeError();
        const int smem = forward_launch_geometry(spec, class_problem(spec))
                             .dynamic_smem_bytes;
        auto kernel = LoadedKernel::load(cubin->bytes, cubin->entry, smem);
        if (!kernel) return kernel.takeError();
        return std::make_unique<LoadedKernel>(std::move(*kernel));
      });
}

llvm::Error launch_forward(const Problem &problem, const ForwardArgs &args, CUstream stream,
                           const KernelConfig &config) {
  if (llvm::Error e = validate_problem(problem)) return with_context(problem, std::move(e));
  if (llvm::Error e = validate_forward_args(problem, args))
    return with_context(problem, std::move(e));
  auto context = current_or_primary_context();
  if (!context) return with_context(problem, context.takeError());
  const CallKey key = CallKey::make(reinterpret_cast<uintptr_t>(context->context), problem, config);
  const Plan *plan = PlanCache::process().find(key);
  if (!plan) {
    auto spec = resolve_forward_spec(problem, config);
    if (!spec) return with_context(problem, spec.takeError());
    auto kernel = get_forward_kernel(*spec);
    if (!kernel) return with_context(problem, kernel.takeError());
    plan = PlanCache::process().insert(key, Plan{*spec, &*kernel});
  }

  FwdParams params = make_forward_params(problem, args);
  if (plan->spec.config.path == KernelPath::sm90)  // + TMA tensor maps
    return with_context(problem, launch_forward_sm90(*plan->kernel, plan->spec, problem, args,
                                                     params, stream));
  void *kernel_args[] = {&params};
  return with_context(problem, plan->kernel->launch(forward_launch_geometry(plan->spec, problem),
                                                    stream, kernel_args));
}

}  // namespace flashjit
