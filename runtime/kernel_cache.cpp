#include "runtime/kernel_cache.h"

#include <future>
#include <mutex>
#include <shared_mutex>

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

namespace flashjit {

// One slot per (context, id). A slot is published before its build runs, so
// concurrent first requests find it and wait on `done` instead of building
// again. Waiters hold the slot by shared_ptr: a failed slot is erased from the
// map (failures are not cached) while they still read its message.
struct KernelCacheSlot {
  std::promise<void> promise;
  std::shared_future<void> done = promise.get_future().share();
  std::unique_ptr<LoadedKernel> kernel;  // set on success, before `done`
  std::string error;                     // set on failure, before `done`
};

struct KernelCache::Impl {
  mutable std::shared_mutex mutex;
  // Keyed by context first: a module belongs to one context, and a kernel ID
  // alone would hand one context's function to another. (A context destroyed
  // and recreated at the same address would alias; the primary context, the
  // common case, is never destroyed while we hold our retain.)
  llvm::DenseMap<CUcontext, llvm::StringMap<std::shared_ptr<KernelCacheSlot>>> slots;
};

std::shared_ptr<KernelCache::Impl> KernelCache::make_impl() { return std::make_shared<Impl>(); }

llvm::Expected<const LoadedKernel &> KernelCache::get_or_build(const std::string &id,
                                                               CUcontext context,
                                                               const Builder &build) {
  Impl &impl = *impl_;
  std::shared_ptr<KernelCacheSlot> slot;
  {
    // The hot path: a built kernel under a shared lock, no allocation.
    std::shared_lock lock(impl.mutex);
    auto per_context = impl.slots.find(context);
    if (per_context != impl.slots.end()) {
      auto it = per_context->second.find(id);
      if (it != per_context->second.end()) slot = it->second;
    }
  }
  bool builder = false;
  if (!slot) {
    std::unique_lock lock(impl.mutex);
    std::shared_ptr<KernelCacheSlot> &entry = impl.slots[context][id];
    if (!entry) {
      entry = std::make_shared<KernelCacheSlot>();
      builder = true;
    }
    slot = entry;
  }

  if (builder) {
    // Built outside the lock: a compile takes a second, and other keys must
    // not wait for it.
    llvm::Expected<std::unique_ptr<LoadedKernel>> built = build();
    if (built && !*built)
      built = llvm::createStringError(llvm::inconvertibleErrorCode(),
                                      "the builder of kernel " + id + " returned no kernel");
    if (built) {
      slot->kernel = std::move(*built);
    } else {
      slot->error = llvm::toString(built.takeError());
      std::unique_lock lock(impl.mutex);
      auto &per_context = impl.slots[context];
      auto it = per_context.find(id);
      if (it != per_context.end() && it->second == slot) per_context.erase(it);
    }
    slot->promise.set_value();
  } else {
    slot->done.wait();
  }

  if (slot->kernel) return *slot->kernel;
  return llvm::createStringError(llvm::inconvertibleErrorCode(), slot->error);
}

size_t KernelCache::size() const {
  std::shared_lock lock(impl_->mutex);
  size_t n = 0;
  for (const auto &per_context : impl_->slots)
    for (const auto &entry : per_context.second)
      // A slot still building is not ready yet; only finished successes count.
      if (entry.second->done.wait_for(std::chrono::seconds(0)) == std::future_status::ready &&
          entry.second->kernel)
        ++n;
  return n;
}

KernelCache &KernelCache::process() {
  // Leaked on purpose: destroying it at exit would unload modules after the
  // driver (or the context's owner, e.g. PyTorch) may have shut down.
  static KernelCache *cache = new KernelCache;
  return *cache;
}

}  // namespace flashjit
