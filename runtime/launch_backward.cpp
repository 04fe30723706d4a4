#include "runtime/launch_backward.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include "generator/backward_params.h"
#include "generator/backward_spec.h"
#include "generator/backward_steps.h"
#include "generator/block_map.h"
#include "generator/source.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/backward_source.h"
#include "runtime/block_map_launch.h"
#include "runtime/device.h"
#include "runtime/element_checks.h"
#include "runtime/kernel_cache.h"
#include "runtime/launch_forward.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tensor_checks.h"
#include "runtime/tensor_maps.h"
#include "runtime/tuning_key.h"

namespace flashjit {

namespace {

llvm::Error args_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

llvm::Error with_context(const Problem &problem, llvm::Error error) {
  return with_call_context("backward", problem, std::move(error));
}

// One NVRTC compile serves the three kernels of a spec: the cubin is kept
// until all three are loaded (and for other contexts later).
llvm::Expected<std::shared_ptr<const Cubin>> backward_cubin(const KernelSpec &spec) {
  static std::mutex mutex;
  static auto *cubins = new std::map<std::string, std::shared_ptr<const Cubin>>;
  const std::string id = spec.id();
  {
    std::lock_guard lock(mutex);
    auto it = cubins->find(id);
    if (it != cubins->end()) return it->second;
  }
  // From the database's cubin store when a tune or precompile put it there.
  auto stored = kernel_cubin(spec, process_tuning_db());
  if (!stored) return stored.takeError();
  Cubin cubin{std::move(stored->bytes), "", stored->compile_ms, spec.arch};
  std::lock_guard lock(mutex);
  return cubins->try_emplace(id, std::make_shared<const Cubin>(std::move(cubin))).first->second;
}

// A measurement switch's value from the environment (0 when unset): read
// once per process by its caller.
int measurement_switch(const char *name) {
  const char *v = std::getenv(name);
  return v ? std::atoi(v) : 0;
}

// `id` is spec.id(), computed once per call by the caller.
llvm::Expected<const LoadedKernel &> backward_kernel(const KernelSpec &spec, const std::string &id,
                                                     CUcontext context, const std::string &entry,
                                                     int smem_bytes) {
  // The kernel cache compiles each key once even under concurrent calls;
  // the key names the spec (every parameter, the arch included) and entry.
  return KernelCache::process().get_or_build(
      id + "#" + entry, context,
      [&]() -> llvm::Expected<std::unique_ptr<LoadedKernel>> {
        auto cubin = backward_cubin(spec);
        if (!cubin) return cubin.takeError();
        auto kernel = LoadedKernel::load((*cubin)->bytes, entry, smem_bytes);
        if (!kernel) return kernel.takeError();
        return std::make_unique<LoadedKernel>(std::move(*kernel));
      });
}


}  // namespace

llvm::Error validate_backward_args(const Problem &p, const BackwardArgs &a) {
  if (llvm::Error e = check_varlen_args(p, a.varlen)) return e;
  // [batch, seqlen, heads, d], or a packed batch's [1, total, heads, d].
  const auto [qb, qs] = query_extent(p, a.varlen);
  const auto [kb, ks] = key_extent(p, a.varlen);
  const TensorCheck tensors[] = {
      {"q", a.q, a.q_strides, qb, qs, p.heads_q},
      {"k", a.k, a.k_strides, kb, ks, p.heads_kv},
      {"v", a.v, a.v_strides, kb, ks, p.heads_kv},
      {"o", a.o, a.o_strides, qb, qs, p.heads_q},
      {"dout", a.dout, a.dout_strides, qb, qs, p.heads_q},
      {"dq", a.dq, a.dq_strides, qb, qs, p.heads_q},
      {"dk", a.dk, a.dk_strides, kb, ks, p.heads_kv},
      {"dv", a.dv, a.dv_strides, kb, ks, p.heads_kv},
  };
  const size_t needed = backward_workspace_bytes(p, a.varlen.total_q);
  if (a.workspace_bytes < needed)
    return args_error(llvm::formatv(
        "argument workspace: {0} bytes given, {1} needed (backward_workspace_bytes)",
        a.workspace_bytes, needed));
  llvm::SmallVector<PointerCheck, 4> extra = {{"lse", a.lse, 4}, {"workspace", a.workspace, 16}};
  if (p.varlen) {
    extra.push_back({"cu_seqlens_q", a.varlen.cu_seqlens_q, 4});
    extra.push_back({"cu_seqlens_k", a.varlen.cu_seqlens_k, 4});
    if (a.varlen.seqused_q) extra.push_back({"seqused_q", a.varlen.seqused_q, 4});
    if (p.seqused_k) extra.push_back({"seqused_k", a.varlen.seqused_k, 4});
  }
  if (!p.seqused_k != !a.varlen.seqused_k)
    return args_error(p.seqused_k
                          ? "varlen.seqused_k is null: the problem has per-sequence key counts "
                            "(seqused_k); pass the forward's cache_seqlens, int32 [batch]"
                          : "varlen.seqused_k was given but the problem has no per-sequence key "
                            "counts: set Problem::seqused_k");
  return check_tensors(tensors, extra);
}

llvm::Expected<KernelSpec> resolve_backward_spec(const Problem &problem,
                                                 const KernelConfig &config,
                                                 const Modifiers *modifiers) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  // caller > tuned > nearest > heuristic, as the forward (backward_source.h).
  return backward_spec_for_call(problem, config, static_cast<int>(context->device), modifiers);
}

llvm::Error launch_backward(const Problem &problem, const BackwardArgs &args, CUstream stream,
                            const KernelConfig &config) {
  // Before validate_problem, so that an fp8 problem hears why by name.
  if (llvm::Error e = refuse_fp8_backward(problem)) return with_context(problem, std::move(e));
  if (llvm::Error e = validate_element_types(problem)) return with_context(problem, std::move(e));
  if (llvm::Error e = validate_problem(problem)) return with_context(problem, std::move(e));
  // The modifiers first: checked without the driver.
  if (llvm::Error e = validate_modifier_args(args.modifiers, args.aux, args.aux_bytes))
    return with_context(problem, std::move(e));
  if (llvm::Error e = validate_sink_args(args.modifiers, args.sinks, args.dsinks, true))
    return with_context(problem, std::move(e));
  if (llvm::Error e = validate_block_mask(problem, args.modifiers, args.block_mask))
    return with_context(problem, std::move(e));
  const bool modified = args.modifiers && !args.modifiers->empty();
  // The score_mod's derivative, given apart or in its snippet: found
  // without the GPU (a probe compiled once per snippet).
  if (modified)
    if (llvm::Error e = check_score_mod_grad(*args.modifiers, process_tuning_db()))
      return with_context(problem,
                          args_error("argument modifiers: " + llvm::toString(std::move(e))));
  if (llvm::Error e = validate_backward_args(problem, args))
    return with_context(problem, std::move(e));
  if (problem.varlen && args.varlen.total_q == 0) return llvm::Error::success();  // no query
  // A packed batch is classed by its longest sequence and its total.
  auto spec = resolve_backward_spec(class_view(problem, args.varlen.total_q), config,
                                    modified ? args.modifiers : nullptr);
  if (!spec) return with_context(problem, spec.takeError());
  auto context = current_or_primary_context();
  if (!context) return with_context(problem, context.takeError());

  // Preprocess, the main kernel, the dQ conversion or kernel, the sinks'
  // gradient (generator/backward_steps.h), and a mask_mod's block map.
  const auto steps = backward_steps(*spec, problem);
  BackwardKernelSet kernels;
  kernels.id = spec->id();  // a format and a hash of the snippets: once a call
  for (size_t i = 0; i < steps.size(); ++i) {
    auto kernel = backward_kernel(*spec, kernels.id, context->context, steps[i].entry,
                                  steps[i].geometry.dynamic_smem_bytes);
    if (!kernel) return with_context(problem, kernel.takeError());
    kernels.steps[i] = &*kernel;
  }
  if (has_block_map(*spec)) {
    for (auto [into, entry] : {std::pair{&kernels.block_kinds, "flashjit_bwd_block_kinds"},
                               std::pair{&kernels.block_list, "flashjit_bwd_block_list"},
                               std::pair{&kernels.block_mask_grid, "flashjit_block_mask_grid"}}) {
      auto kernel = backward_kernel(*spec, kernels.id, context->context, entry, 0);
      if (!kernel) return with_context(problem, kernel.takeError());
      *into = &*kernel;
    }
  }
  if (llvm::Error e = enqueue_backward(kernels, *spec, problem, args, stream))
    return with_context(problem, std::move(e));
  return llvm::Error::success();
}

llvm::Error enqueue_backward(const BackwardKernelSet &kernels, const KernelSpec &spec,
                             const Problem &problem, const BackwardArgs &args, CUstream stream) {
  const bool sm90 = spec.config.path == KernelPath::sm90;
  // The sm90 kernel's grid: a CTA per SM of the device it was loaded on.
  // (FLASHJIT_BWD_CTA_PER_ITEM=1, a measurement switch: a CTA per item.)
  static const bool per_item = measurement_switch("FLASHJIT_BWD_CTA_PER_ITEM") == 1;
  const int sm_count = sm90 && kernels.steps[1] && !per_item ? kernels.steps[1]->sm_count() : 0;
  const auto steps = backward_steps(spec, problem, sm_count);
  BwdParams params =
      make_backward_params(problem, args, spec.config.deterministic, spec.config.block_n);
  // (Measurement switches: FLASHJIT_BWD_DISPATCH_SECTION=N, the sm90
  // kernel's work in sections of N (KV head, batch) pairs, and
  // FLASHJIT_BWD_DISPATCH_ORDER=1 or 2, the deterministic kernel's key
  // blocks longest or shortest first, instead of
  // BwdSm90Traits::dispatch_order's choice. The dQ order follows either.)
  static const int section = measurement_switch("FLASHJIT_BWD_DISPATCH_SECTION");
  static const int order = measurement_switch("FLASHJIT_BWD_DISPATCH_ORDER");
  if (sm90 && section > 0)
    params.dispatch_section = static_cast<int>(
        std::min<int64_t>(section, std::max<int64_t>(1, problem.heads_kv * problem.batch)));
  if (sm90 && spec.config.deterministic && (order == 1 || order == 2))
    params.shortest_first = order == 2 ? 1 : 0;
  void *kernel_args[] = {&params};
  // The sm90 kernel also takes TMA tensor maps of Q, K, V, dO and the dQ
  // accumulator, encoded before anything is enqueued so a map the driver
  // refuses launches nothing.
  BackwardTensorMaps maps{};
  if (sm90) {
    auto encoded = make_backward_tensor_maps(spec, problem, args);
    if (!encoded) return encoded.takeError();
    maps = *encoded;
  }
  void *sm90_args[] = {&params, &maps.q, &maps.k, &maps.v, &maps.dout, &maps.dq_accum};
  // The caller's mask_mod's block map (bwd_block_map.cuh), built in stream
  // order before the main kernel reads it, in a workspace freed after it.
  CUdeviceptr block_map = 0;
  if (has_block_map(spec)) {
    if (!kernels.block_kinds || !kernels.block_list || !kernels.block_mask_grid)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "backward program " + spec.id() +
                                         ": its block map's kernels are not loaded");
    // Kept across calls where it is a function of the shape and scalar aux
    // values alone (runtime/block_map_cache.h).
    const BlockMapGeometry map = backward_block_map_geometry(spec, problem);
    auto built = enqueue_block_map(
        *kernels.block_kinds, *kernels.block_list, *kernels.block_mask_grid, nullptr,
        args.block_mask, map, params, stream, "query tiles",
        reusable_block_map_key(kernels.id, spec.modifiers, problem, params.aux,
                               args.block_mask != nullptr, map));
    if (!built) return built.takeError();
    block_map = *built;
  }
  llvm::Error error = llvm::Error::success();
  for (size_t i = 0; i < steps.size() && !error; ++i) {
    // The main kernel (step 1) alone takes the tensor maps.
    error = kernels.steps[i]->launch(steps[i].geometry, stream,
                                     sm90 && i == 1 ? sm90_args : kernel_args);
    if (i == 1 && block_map) {
      error = llvm::joinErrors(std::move(error), free_workspace(block_map, stream));
      block_map = 0;
    }
  }
  if (block_map) error = llvm::joinErrors(std::move(error), free_workspace(block_map, stream));
  return error;
}

}  // namespace flashjit
