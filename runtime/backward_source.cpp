#include "runtime/backward_source.h"

#include <mutex>
#include <unordered_map>

#include "generator/backward_spec.h"
#include "generator/modifier_source.h"
#include "llvm/ADT/Hashing.h"
#include "runtime/call_key.h"
#include "runtime/modifier_facts.h"
#include "runtime/tuning_key.h"

namespace flashjit {

llvm::Expected<ChosenConfig> choose_backward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device, TuningDb *db,
                                                    llvm::StringRef modifiers) {
  const TargetArch arch = device.target();
  const int max_smem = device.max_smem_per_block_optin;
  PassRules rules;
  rules.class_pass = class_pass(Pass::backward, requested.deterministic);
  rules.modifiers = modifiers.str();
  rules.validate = [&](const KernelConfig &config) {
    return make_backward_spec(problem, config, arch, max_smem).takeError();
  };
  rules.heuristic = [&](const KernelConfig &partial) {
    return default_backward_config(problem, arch, max_smem, partial, !modifiers.empty());
  };
  return choose_config(problem, requested, device, db, rules);
}

llvm::Expected<ChosenConfig> explain_backward_config(const Problem &problem,
                                                     const KernelConfig &requested,
                                                     const DeviceInfo &device,
                                                     llvm::StringRef modifiers) {
  return choose_backward_config(problem, requested, device, process_tuning_db(), modifiers);
}

llvm::Expected<KernelSpec> backward_spec_for_call(const Problem &problem,
                                                  const KernelConfig &requested, int ordinal,
                                                  const Modifiers *modifiers) {
  static std::mutex mutex;
  static auto *specs = new std::unordered_map<CallKey, KernelSpec, CallKeyHash>;
  const bool modified = modifiers && !modifiers->empty();
  const CallKey key = CallKey::make(static_cast<uintptr_t>(ordinal), problem, requested,
                                    modified ? call_modifiers_key(*modifiers) : 0);
  {
    std::lock_guard lock(mutex);
    if (auto it = specs->find(key); it != specs->end()) return it->second;
  }
  auto device = cached_device_info(ordinal);
  if (!device) return device.takeError();
  Modifiers compiled;
  if (modified) {
    auto resolved = resolve_modifiers(*modifiers, Pass::backward, device->target(),
                                      process_tuning_db());
    if (!resolved) return resolved.takeError();
    compiled = std::move(*resolved);
  }
  auto chosen = choose_backward_config(problem, requested, *device, process_tuning_db(),
                                       modifiers_hash(compiled));
  if (!chosen) return chosen.takeError();
  auto spec = make_backward_spec(problem, chosen->config, device->target(),
                                 device->max_smem_per_block_optin);
  if (!spec) return spec.takeError();
  spec->modifiers = std::move(compiled);
  // Invalid requests are not remembered: they fail again, with their error.
  std::lock_guard lock(mutex);
  return specs->try_emplace(key, std::move(*spec)).first->second;
}

}  // namespace flashjit
