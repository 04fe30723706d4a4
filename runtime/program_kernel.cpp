#include "runtime/program_kernel.h"

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "generator/modifier_source.h"
#include "runtime/device.h"
#include "runtime/kernel_cache.h"
#include "runtime/kernel_source.h"

namespace flashjit {

namespace {

// The program's cubin for the process, by id.
llvm::Expected<std::shared_ptr<const std::vector<char>>> program_cubin(
    const std::string &id, const TargetArch &arch, llvm::function_ref<GeneratedSource()> source,
    TuningDb *store) {
  static std::mutex mutex;
  static auto *cubins = new std::map<std::string, std::shared_ptr<const std::vector<char>>>;
  {
    std::lock_guard lock(mutex);
    auto it = cubins->find(id);
    if (it != cubins->end()) return it->second;
  }
  auto cubin = stored_cubin(source(), arch, id, store ? store : process_tuning_db());
  if (!cubin) return cubin.takeError();
  auto bytes = std::make_shared<const std::vector<char>>(std::move(cubin->bytes));
  std::lock_guard lock(mutex);
  return cubins->try_emplace(id, std::move(bytes)).first->second;
}

}  // namespace

std::string program_id(llvm::StringRef name, const TargetArch &arch, const Modifiers &modifiers) {
  return name.str() + "_" + arch.name() +
         (modifiers.empty() ? std::string() : "_mod" + modifiers_hash(modifiers));
}

llvm::Expected<const LoadedKernel &> program_kernel(llvm::StringRef name,
                                                    const Modifiers &modifiers,
                                                    llvm::function_ref<GeneratedSource()> source,
                                                    const char *entry, int dynamic_smem_bytes,
                                                    TuningDb *store) {
  auto context = current_or_primary_context();
  if (!context) return context.takeError();
  auto device = query_device(static_cast<int>(context->device));
  if (!device) return device.takeError();
  // The arch, as cubins are arch-specific; the modifiers' hash, as their
  // snippets are compiled in.
  const TargetArch arch = device->target();
  const std::string id = program_id(name, arch, modifiers);
  return KernelCache::process().get_or_build(
      id + "#" + entry, context->context,
      [&]() -> llvm::Expected<std::unique_ptr<LoadedKernel>> {
        auto cubin = program_cubin(id, arch, source, store);
        if (!cubin) return cubin.takeError();
        auto kernel = LoadedKernel::load(**cubin, entry, dynamic_smem_bytes);
        if (!kernel) return kernel.takeError();
        return std::make_unique<LoadedKernel>(std::move(*kernel));
      });
}

}  // namespace flashjit
