#include "runtime/launch_forward.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "generator/block_map.h"
#include "generator/forward_params.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/modifier_source.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/block_map_launch.h"
#include "runtime/call_key.h"
#include "runtime/cuda_driver.h"
#include "runtime/device.h"
#include "runtime/element_checks.h"
#include "runtime/kernel_cache.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/tensor_checks.h"
#include "runtime/tensor_maps.h"
#include "runtime/tuning_key.h"
#include "runtime/workspace_pool.h"

namespace flashjit {
namespace {

llvm::Error with_context(const Problem &problem, llvm::Error error) {
  return with_call_context("forward", problem, std::move(error));
}


struct Plan {
  KernelSpec spec;
  ForwardKernels kernels;
  // The split count asked of every call: the caller's or the tuning's; 0
  // leaves it to the heuristic per call (the batch, heads and lengths of one
  // call class still differ).
  int splits = 0;
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
  const KvCacheArgs &cache = args.cache;
  auto fail = [](const llvm::Twine &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
  };
  const bool paged = problem.page_size > 0;
  const VarlenArgs &varlen = args.varlen;
  if (llvm::Error e = check_varlen_args(problem, varlen)) return e;
  // Paged K/V are [num_pages, page_size, heads_kv, d]; a packed batch is
  // [total, heads, d] (one batch entry).
  const auto [q_outer, q_rows] = query_extent(problem, varlen);
  const auto [kv_outer, kv_rows] = forward_key_extent(problem, args);
  if (paged && (cache.num_pages < 1 || cache.num_pages > std::numeric_limits<int32_t>::max()))
    return fail(llvm::formatv("cache.num_pages={0} is invalid: a paged cache (page_size={1}) "
                              "needs 1 to 2^31-1 pages (K and V's first dimension)",
                              cache.num_pages, problem.page_size));
  // Each tensor's element size: Q's dtype, K's and V's kv_element (an fp8
  // cache under 16-bit Q), O's out_element.
  const int q_bytes = element_bytes(problem.dtype);
  const int kv_bytes = element_bytes(kv_element(problem));
  const int o_bytes = element_bytes(out_element(problem));
  llvm::SmallVector<TensorCheck, 6> tensors = {
      {"q", args.q, args.q_strides, q_outer, q_rows, problem.heads_q, q_bytes},
      {"k", args.k, args.k_strides, kv_outer, kv_rows, problem.heads_kv, kv_bytes},
      {"v", args.v, args.v_strides, kv_outer, kv_rows, problem.heads_kv, kv_bytes},
      {"o", args.o, args.o_strides, q_outer, q_rows, problem.heads_q, o_bytes},
  };
  llvm::SmallVector<PointerCheck, 8> extra;
  if (llvm::Error e = check_descales(problem, args.descale, extra)) return e;
  if (problem.varlen) {
    extra.push_back({"cu_seqlens_q", varlen.cu_seqlens_q, alignof(int32_t)});
    if (varlen.cu_seqlens_k)  // optional over a paged cache with seqused_k
      extra.push_back({"cu_seqlens_k", varlen.cu_seqlens_k, alignof(int32_t)});
    if (varlen.seqused_q)
      extra.push_back({"seqused_q", varlen.seqused_q, alignof(int32_t)});
  }
  // The LSE output is optional.
  if (args.lse) extra.push_back({"lse", args.lse, alignof(float)});
  // The backward's copy of the key counts may ride along; another is a
  // second, conflicting answer.
  if (varlen.seqused_k && varlen.seqused_k != cache.cache_seqlens)
    return fail("varlen.seqused_k differs from cache.cache_seqlens: the forward takes the key "
                "counts as cache_seqlens (varlen.seqused_k is the backward's); pass one array");
  const bool has_cache = problem.seqused_k || paged;
  if (!has_cache) {
    if (cache.cache_seqlens || cache.page_table || cache.k_new || cache.v_new ||
        cache.cache_batch_idx || cache.cache_leftpad)
      return fail("cache arguments (cache_seqlens, page_table, k_new, v_new, cache_batch_idx, "
                  "cache_leftpad) were given for a "
                  "problem without a KV cache: set Problem::seqused_k (and page_size when "
                  "paged)");
    return check_tensors(tensors, extra);
  }
  if (problem.seqused_k != (cache.cache_seqlens != nullptr))
    return fail(problem.seqused_k
                    ? "cache.cache_seqlens is null: the problem has per-sequence key counts "
                      "(seqused_k); pass an int32 [batch] device array"
                    : "cache.cache_seqlens was given but the problem has no per-sequence key "
                      "counts: set Problem::seqused_k");
  // A packed batch appends packed new keys (cu_seqlens_k_new) or reads the
  // cache as it is (flash_attn_varlen_func).
  if (problem.varlen && (cache.k_new || cache.v_new) && !cache.cu_seqlens_k_new)
    return fail("cache.k_new/v_new were given for a packed batch (varlen) without "
                "cu_seqlens_k_new: pass each sequence's first new row (int32 [batch + 1]), or "
                "append the new keys first");
  if (cache.cu_seqlens_k_new && !(problem.varlen && cache.k_new))
    return fail("cache.cu_seqlens_k_new was given without packed new keys: it places a packed "
                "batch's (varlen) k_new/v_new rows; pass them, or null");
  if (problem.seqused_k) extra.push_back({"cache_seqlens", cache.cache_seqlens, alignof(int32_t)});
  if (paged) {
    if (!cache.page_table)
      return fail(llvm::formatv("cache.page_table is null: a paged cache (page_size={0}) needs an "
                                "int32 [batch, seqlen_k / page_size] device array",
                                problem.page_size));
    const int64_t width = problem.seqlen_k / problem.page_size;
    if (problem.batch > 1 && (cache.page_table_stride < width ||
                              cache.page_table_stride > (int64_t(1) << 40)))
      return fail(llvm::formatv("cache.page_table_stride={0} is invalid: expected at least the "
                                "table's width seqlen_k / page_size = {1} (rows must not "
                                "overlap) and below 2^40",
                                cache.page_table_stride, width));
    extra.push_back({"page_table", cache.page_table, alignof(int32_t)});
  } else if (cache.page_table) {
    return fail("cache.page_table was given but the problem's page_size is 0 (contiguous K/V)");
  }
  if (cache.cache_batch_idx || cache.cache_leftpad) {
    const char *which = cache.cache_batch_idx ? "cache_batch_idx" : "cache_leftpad";
    if (!problem.seqused_k)
      return fail(llvm::formatv("cache.{0} needs cache_seqlens (Problem::seqused_k): it places "
                                "each sequence's keys in a KV cache",
                                which));
    if (paged || problem.varlen)
      return fail(llvm::formatv("cache.{0} was given for a {1}: it places sequences in a "
                                "contiguous cache [cache_batches, seqlen_k, heads_kv, d]; a "
                                "page table already places each sequence's keys",
                                which, paged ? "paged cache" : "packed batch (varlen)"));
    if (cache.cache_leftpad)
      extra.push_back({"cache_leftpad", cache.cache_leftpad, alignof(int32_t)});
  }
  if (cache.cache_batch_idx) {
    if (cache.cache_batches < 1 || cache.cache_batches > std::numeric_limits<int32_t>::max())
      return fail(llvm::formatv("cache.cache_batches={0} is invalid: cache_batch_idx needs K and "
                                "V's number of batch entries, 1 to 2^31-1",
                                cache.cache_batches));
    extra.push_back({"cache_batch_idx", cache.cache_batch_idx, alignof(int32_t)});
  } else if (cache.cache_batches != 0) {
    return fail(llvm::formatv("cache.cache_batches={0} without cache_batch_idx: pass the "
                              "sequences' batch entries, or 0",
                              cache.cache_batches));
  }
  if ((cache.k_new != nullptr) != (cache.v_new != nullptr))
    return fail("cache.k_new and cache.v_new: pass both (this step's keys and values) or neither");
  if (cache.k_new) {
    if (!problem.seqused_k)
      return fail("cache.k_new/v_new need cache_seqlens (Problem::seqused_k): the new keys are "
                  "written at each sequence's cache_seqlens");
    if (problem.varlen) {
      if (cache.seqlen_new < 1 || cache.seqlen_new > std::numeric_limits<int32_t>::max())
        return fail(llvm::formatv("cache.seqlen_new={0} is invalid: a packed batch's new keys "
                                  "are 1 to 2^31-1 rows",
                                  cache.seqlen_new));
    } else if (cache.seqlen_new < 1 || cache.seqlen_new > problem.seqlen_k) {
      return fail(llvm::formatv("cache.seqlen_new={0} is invalid: expected 1 to seqlen_k={1} "
                                "new keys per sequence",
                                cache.seqlen_new, problem.seqlen_k));
    }
    // New keys and values come in Q's dtype: 16-bit ones are quantized into
    // an fp8 cache with its k/v descales, e4m3 ones copied as they are. A
    // packed batch's are one [seqlen_new, heads_kv, d] block of rows.
    const int64_t new_outer = problem.varlen ? 1 : problem.batch;
    tensors.push_back({"k_new", cache.k_new, cache.k_new_strides, new_outer, cache.seqlen_new,
                       problem.heads_kv, q_bytes});
    tensors.push_back({"v_new", cache.v_new, cache.v_new_strides, new_outer, cache.seqlen_new,
                       problem.heads_kv, q_bytes});
    if (cache.cu_seqlens_k_new)
      extra.push_back({"cu_seqlens_k_new", cache.cu_seqlens_k_new, alignof(int32_t)});
  } else if (cache.seqlen_new != 0) {
    return fail(llvm::formatv("cache.seqlen_new={0} without k_new/v_new: pass the new keys and "
                              "values, or 0",
                              cache.seqlen_new));
  }
  return check_tensors(tensors, extra);
}

namespace {

// The spec and where its config came from, on `context`'s device: the
// caller's complete config, else the database's tuning, else the heuristic;
// a stored config that no longer validates was already passed over, so an
// error here is the caller's config or the problem.
struct ResolvedSpec {
  KernelSpec spec;
  ConfigSource source;
};
llvm::Expected<ResolvedSpec> resolve(const Problem &problem, const KernelConfig &config,
                                     const ContextInfo &context, llvm::StringRef modifiers = "") {
  auto device = cached_device_info(int(context.device));  // a CUdevice is its ordinal
  if (!device) return device.takeError();
  auto chosen = choose_forward_config(problem, config, *device, process_tuning_db(), modifiers);
  if (!chosen) return chosen.takeError();
  auto spec = make_forward_spec(problem, chosen->config, device->target(),
                                device->max_smem_per_block_optin, !modifiers.empty());
  if (!spec) return spec.takeError();
  return ResolvedSpec{std::move(*spec), chosen->source};
}

}  // namespace

llvm::Expected<KernelSpec> resolve_forward_spec(const Problem &problem,
                                                const KernelConfig &config) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  auto resolved = resolve(problem, config, *context);
  if (!resolved) return resolved.takeError();
  return std::move(resolved->spec);
}

llvm::Expected<const LoadedKernel &> get_forward_kernel(const KernelSpec &spec) {
  auto kernels = get_forward_kernels(spec);
  if (!kernels) return kernels.takeError();
  return *kernels->main;
}

llvm::Expected<ForwardKernels> get_forward_kernels(const KernelSpec &spec) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  // The ID names every parameter of the compiled code, the architecture
  // included (cubins are arch-specific); the cache adds the context. Each
  // entry of the program is loaded under its own key.
  auto load = [&](const std::string &key, int smem, const char *entry) {
    return KernelCache::process().get_or_build(
        key, context->context, [&]() -> llvm::Expected<std::unique_ptr<LoadedKernel>> {
          // From the database's cubin store when there (no NVRTC run), else
          // compiled and stored for the next process.
          auto cubin = forward_cubin(spec, process_tuning_db());
          if (!cubin) return cubin.takeError();
          auto kernel = LoadedKernel::load(cubin->bytes, entry ? std::string(entry) : cubin->entry, smem);
          if (!kernel) return kernel.takeError();
          return std::make_unique<LoadedKernel>(std::move(*kernel));
        });
  };
  ForwardKernels out;
  out.id = spec.id();
  const LaunchGeometry geometry = forward_block_geometry(spec);
  auto main = load(out.id, geometry.dynamic_smem_bytes, nullptr);
  if (!main) return main.takeError();
  out.main = &*main;
  auto per_sm = out.main->occupancy(int(geometry.block.x));
  if (!per_sm) return per_sm.takeError();
  out.resident_ctas = out.main->sm_count() * std::max(*per_sm, 1);
  if (spec.split_kv) {
    auto combine = load(out.id + "#combine", 0, "flashjit_fwd_combine");
    if (!combine) return combine.takeError();
    out.combine = &*combine;
  }
  if (appends_keys(spec)) {
    auto append = load(out.id + "#append", 0, "flashjit_kv_append");
    if (!append) return append.takeError();
    out.append = &*append;
  }
  if (spec.config.path == KernelPath::sm90 && spec.varlen) {
    auto order = load(out.id + "#sequence_order", 0, "flashjit_fwd_sequence_order");
    if (!order) return order.takeError();
    out.sequence_order = &*order;
  }
  if (has_block_map(spec)) {
    auto kinds = load(out.id + "#block_kinds", 0, "flashjit_fwd_block_kinds");
    if (!kinds) return kinds.takeError();
    out.block_kinds = &*kinds;
    auto list = load(out.id + "#block_list", 0, "flashjit_fwd_block_list");
    if (!list) return list.takeError();
    out.block_list = &*list;
    auto runs = load(out.id + "#block_runs", 0, "flashjit_fwd_block_runs");
    if (!runs) return runs.takeError();
    out.block_runs = &*runs;
    auto grid = load(out.id + "#block_mask_grid", 0, "flashjit_block_mask_grid");
    if (!grid) return grid.takeError();
    out.block_mask_grid = &*grid;
  }
  return out;
}

namespace {
// The main kernel and, with split-KV, its combine over a workspace of partials.
llvm::Error enqueue_main_and_combine(const ForwardKernels &kernels, const Problem &problem,
                                     const ForwardArgs &args, FwdParams &params, int num_splits,
                                     CUstream stream,
                                     llvm::function_ref<llvm::Error()> launch_main);
}  // namespace


llvm::Error enqueue_forward(const ForwardKernels &kernels, const KernelSpec &spec,
                            const Problem &problem, const ForwardArgs &args, FwdParams params,
                            int num_splits, CUstream stream) {
  auto launch_main = [&]() -> llvm::Error {
    if (spec.config.path == KernelPath::sm90)  // + TMA tensor maps
      return launch_forward_sm90(*kernels.main, spec, problem, args, params, stream,
                                 kernels.resident_ctas);
    void *kernel_args[] = {&params};
    return kernels.main->launch(forward_launch_geometry(spec, problem, 0, params.num_splits),
                                stream, kernel_args);
  };
  if (args.cache.k_new) {
    // The new keys and values land in the cache before the forward reads it
    // (stream order).
    if (!kernels.append)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "k_new/v_new need a kernel with per-sequence key counts "
                                     "(Problem::seqused_k)");
    KvAppendParams append = make_kv_append_params(problem, args);
    void *append_args[] = {&append};
    if (llvm::Error e = kernels.append->launch(kv_append_geometry(problem, args.cache.seqlen_new),
                                               stream, append_args, /*dependent=*/true))
      return e;
  }
  // The caller's mask_mod's block map, built in stream order before the
  // main kernel reads it, in a workspace freed after it.
  CUdeviceptr block_map = 0;
  if (kernels.block_kinds) {
    // Kept across calls where it is a function of the shape and scalar aux
    // values alone (runtime/block_map_cache.h).
    const BlockMapGeometry map = forward_block_map_geometry(spec, problem);
    auto built = enqueue_block_map(
        *kernels.block_kinds, *kernels.block_list, *kernels.block_mask_grid, kernels.block_runs,
        args.block_mask, map, params, stream, "key tiles",
        reusable_block_map_key(kernels.id, spec.modifiers, problem, params.aux,
                               args.block_mask != nullptr, map));
    if (!built) return built.takeError();
    block_map = *built;
  }
  auto free_block_map = [&](llvm::Error error) {
    if (block_map)
      if (llvm::Error e = free_workspace(block_map, stream))
        error = llvm::joinErrors(std::move(error), std::move(e));
    return error;
  };
  // A masked packed batch on the sm90 kernel's persistent CTAs takes its
  // work tiles from a counter (common/fwd_scheduler.cuh), zeroed here in
  // stream order. Without a mask a sequence's tiles all cost the same and
  // the static rotation deals them evenly: on the H200 (16 documents of
  // 176..3216 tokens, d=128) the counter took full attention from 627 to
  // 568-586 TFLOP/s and causal from 457 to 524-528. A grid of one CTA per
  // work tile never reads it.
  // A packed batch on persistent CTAs also takes its sequences in the
  // order fwd_sequence_order.cuh computes (heaviest tiles first), which
  // zeroes the counter too; one workspace holds both.
  CUdeviceptr workspace = 0;
  const int splits = num_splits > 1 && kernels.combine ? num_splits : 1;
  // A mask_mod's block map makes any batch's tiles uneven (paged K/V aside,
  // whose producer is a warp: fwd_sm90.cuh).
  const bool takes_tiles = spec.config.path == KernelPath::sm90 &&
                           (spec.varlen || (has_block_map(spec) && spec.page_size == 0)) &&
                           forward_tile_costs_vary(spec);
  const bool ordered = kernels.sequence_order != nullptr && problem.batch <= kOrderedSequencesMax;
  if ((takes_tiles || ordered) &&
      forward_grid_is_persistent(
          spec, problem,
          kernels.resident_ctas > 0 ? kernels.resident_ctas : kernels.main->sm_count(), splits)) {
    const int64_t ints = 1 + (ordered ? problem.batch : 0);
    auto allocated = allocate_workspace(kernels.main->device(), ints * sizeof(int), stream);
    if (!allocated) return free_block_map(allocated.takeError());
    workspace = *allocated;
    if (takes_tiles) params.tile_counter = reinterpret_cast<int *>(workspace);
    llvm::Error e = llvm::Error::success();
    if (ordered) {
      params.sequence_order = reinterpret_cast<int *>(workspace) + 1;
      e = enqueue_sequence_order(*kernels.sequence_order, params, stream);
    } else if (auto driver = cuda_driver()) {
      e = cuda_check(driver->cuMemsetD32Async(workspace, 0, 1, stream), "cuMemsetD32Async");
    } else {
      e = driver.takeError();
    }
    if (e) return free_block_map(llvm::joinErrors(std::move(e), free_workspace(workspace, stream)));
  }
  llvm::Error error = enqueue_main_and_combine(kernels, problem, args, params, num_splits,
                                               stream, launch_main);
  if (workspace) {
    if (llvm::Error e = free_workspace(workspace, stream))
      error = llvm::joinErrors(std::move(error), std::move(e));
  }
  return free_block_map(std::move(error));
}

llvm::Error enqueue_sequence_order(const LoadedKernel &kernel, const FwdParams &params,
                                   CUstream stream) {
  if (params.batch > kOrderedSequencesMax || params.sequence_order == nullptr)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the sequence order kernel orders at most {0} sequences into a buffer; "
                      "got {1} sequences{2}",
                      kOrderedSequencesMax, params.batch,
                      params.sequence_order ? "" : " and no buffer")
            .str());
  LaunchGeometry g;  // fwd_sequence_order.cuh: one CTA of kOrderedSequencesMax threads
  g.grid.x = 1;
  g.block.x = static_cast<unsigned>(kOrderedSequencesMax);
  g.dynamic_smem_bytes = 0;
  FwdParams copy = params;
  void *args[] = {&copy};
  return kernel.launch(g, stream, args, /*dependent=*/true);
}

namespace {
llvm::Error enqueue_main_and_combine(const ForwardKernels &kernels, const Problem &problem,
                                     const ForwardArgs &args, FwdParams &params, int num_splits,
                                     CUstream stream,
                                     llvm::function_ref<llvm::Error()> launch_main) {
  params.num_splits = 1;
  if (num_splits <= 1 || !kernels.combine) return launch_main();

  // The kernels' device: no second context query per call.
  const uint64_t bytes =
      forward_split_workspace_bytes(problem, num_splits, args.varlen.total_q);
  auto allocated = allocate_workspace(kernels.main->device(), bytes, stream);
  if (!allocated)
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("the split-KV workspace of {0} bytes ({1} splits) could not be allocated: "
                      "{2}; pass splits=1 to run without one",
                      bytes, num_splits, llvm::toString(allocated.takeError()))
            .str());
  const CUdeviceptr workspace = *allocated;
  const uint64_t rows = uint64_t(forward_lse_rows(problem, args.varlen.total_q));
  params.num_splits = num_splits;
  params.o_partial = reinterpret_cast<float *>(workspace);
  params.lse_partial = params.o_partial + uint64_t(num_splits) * rows * problem.head_dim_v;
  llvm::Error error = launch_main();
  if (!error) {
    void *combine_args[] = {&params};
    error = kernels.combine->launch(forward_combine_geometry(problem, args.varlen.total_q), stream,
                                   combine_args,
                                   /*dependent=*/true);
  }
  // Freed in stream order after the kernels that use it, launched or not.
  if (llvm::Error e = free_workspace(workspace, stream))
    error = llvm::joinErrors(std::move(error), std::move(e));
  return error;
}
}  // namespace

llvm::Error validate_modifier_args(const Modifiers *modifiers, const void *aux,
                                   size_t aux_bytes) {
  const bool modified = modifiers && !modifiers->empty();
  if (!modified) {
    if (aux || aux_bytes)
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "argument aux: given without modifiers to read it");
    if (modifiers) return validate_modifiers(*modifiers);  // e.g. a lone score_mod_grad
    return llvm::Error::success();
  }
  if (llvm::Error e = validate_modifier_functions(*modifiers)) return e;
  // Then the fields' layout, once per call.
  auto layout = aux_layout(*modifiers);
  if (!layout) return layout.takeError();
  const size_t bytes = static_cast<size_t>(aux_struct_bytes(*layout));
  if (aux_bytes != bytes || (bytes > 0 && !aux))
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("argument aux: {0} bytes{1}, the modifiers' struct Aux takes {2} "
                      "(flashjit::AuxValues packs it)",
                      aux_bytes, aux ? "" : " at a null pointer", bytes)
            .str());
  return llvm::Error::success();
}

llvm::Error validate_sink_args(const Modifiers *modifiers, const float *sinks,
                               const float *dsinks, bool backward) {
  const bool wanted = modifiers && modifiers->sinks;
  auto error = [](const char *message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
  };
  if (wanted && !sinks)
    return error("argument sinks: null, but the modifiers ask for learned sinks "
                 "(Modifiers::sinks): pass heads_q fp32 logits on the device");
  if (!wanted && sinks)
    return error("argument sinks: given, but the modifiers do not ask for learned sinks: set "
                 "Modifiers::sinks (the sinks are compiled into the kernel)");
  if (backward && wanted && !dsinks)
    return error("argument dsinks: null, but the backward of learned sinks writes their "
                 "gradient there: pass heads_q fp32 on the device");
  if (backward && !wanted && dsinks)
    return error("argument dsinks: given without learned sinks (Modifiers::sinks)");
  return llvm::Error::success();
}

llvm::Error launch_forward(const Problem &problem, const ForwardArgs &args, CUstream stream,
                           const KernelConfig &config) {
  if (llvm::Error e = validate_element_types(problem)) return with_context(problem, std::move(e));
  if (llvm::Error e = validate_problem(problem)) return with_context(problem, std::move(e));
  if (llvm::Error e = validate_modifier_args(args.modifiers, args.aux, args.aux_bytes))
    return with_context(problem, std::move(e));
  if (llvm::Error e = validate_sink_args(args.modifiers, args.sinks, nullptr, false))
    return with_context(problem, std::move(e));
  if (llvm::Error e = validate_block_mask(problem, args.modifiers, args.block_mask))
    return with_context(problem, std::move(e));
  if (llvm::Error e = validate_forward_args(problem, args))
    return with_context(problem, std::move(e));
  if (problem.varlen && args.varlen.total_q == 0) return llvm::Error::success();  // no query
  auto context = current_or_primary_context();
  if (!context) return with_context(problem, context.takeError());
  // The caller's modifiers key the plan and are compiled into its kernel
  // (the forward's part of them: modifiers_of_pass), as the plan resolves
  // them once (resolve_modifiers: whether one block map serves every batch
  // and head).
  const bool modified = args.modifiers && !args.modifiers->empty();
  // A packed batch is classed by its longest sequence and its total.
  const Problem chooser = class_view(problem, args.varlen.total_q);
  CallKey key = CallKey::make(
      reinterpret_cast<uintptr_t>(context->context), chooser, config,
      modified ? call_modifiers_key(modifiers_of_pass(*args.modifiers, Pass::forward)) : 0);
  // MLA's latent cache: V a view of K's first head_dim_v columns (the same
  // pointer, rows, heads and pages). The sm90 kernel then reads each tile's
  // bytes once, for both products (KernelSpec::v_in_k).
  key.v_in_k = args.v == args.k && args.v_strides.batch == args.k_strides.batch &&
               args.v_strides.seq == args.k_strides.seq &&
               args.v_strides.head == args.k_strides.head &&
               sm90_forward_v_in_k_fits(problem.head_dim_qk, problem.head_dim_v,
                                        kv_element(problem) == DType::e4m3 ? 1 : 2);
  const Plan *plan = PlanCache::process().find(key);
  if (!plan) {
    Modifiers compiled;
    if (modified) {
      auto device = cached_device_info(int(context->device));
      if (!device) return with_context(problem, device.takeError());
      auto resolved = resolve_modifiers(*args.modifiers, Pass::forward, device->target(),
                                        process_tuning_db());
      if (!resolved) return with_context(problem, resolved.takeError());
      compiled = std::move(*resolved);
    }
    auto resolved = resolve(chooser, config, *context,
                            modifiers_hash(modifiers_of_pass(compiled, Pass::forward)));
    if (!resolved) return with_context(problem, resolved.takeError());
    if (modified) resolved->spec.modifiers = std::move(compiled);
    resolved->spec.v_in_k = key.v_in_k && resolved->spec.config.path == KernelPath::sm90;
    auto kernels = get_forward_kernels(resolved->spec);
    if (!kernels) return with_context(problem, kernels.takeError());
    // The split count of every call: the caller's or the tuning's; else the
    // heuristic's, per call.
    const bool fixed = config.splits > 0 || resolved->source == ConfigSource::tuned ||
                       resolved->source == ConfigSource::nearest;
    const int splits = fixed ? resolved->spec.config.splits : 0;
    plan = PlanCache::process().insert(key, Plan{std::move(resolved->spec), *kernels, splits});
  }
  // An explicit split count this call's keys cannot serve is an error; a
  // tuning's or the heuristic's is clamped to the key tiles.
  if (config.splits > 1 && plan->spec.split_kv) {
    const int64_t tiles = forward_key_tiles(problem, plan->spec.config.block_n);
    if (config.splits > tiles)
      return with_context(
          problem, llvm::createStringError(
                       llvm::inconvertibleErrorCode(),
                       llvm::formatv("splits={0} exceeds the {1} key tiles of block_n={2} keys "
                                     "(seqlen_k={3}): use splits <= {1}",
                                     config.splits, tiles, plan->spec.config.block_n,
                                     problem.seqlen_k)
                           .str()));
  }
  const int num_splits =
      forward_num_splits(plan->spec, problem, plan->splits, plan->kernels.main->sm_count());
  return with_context(problem, enqueue_forward(plan->kernels, plan->spec, problem, args,
                                               make_forward_params(problem, args), num_splits,
                                               stream));
}

}  // namespace flashjit
