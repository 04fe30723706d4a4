#include "runtime/backward_source.h"

#include <mutex>
#include <unordered_map>

#include "generator/backward_spec.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"

namespace flashjit {
namespace {

// What selects a backward call's spec: the device, the compiled code's
// parameters, the request, and (when the config is left to flashjit) the
// rest of the database's class, since a tuning may differ per bucket. Plain
// integers, so building the key allocates nothing.
struct CallKey {
  int ordinal;
  DType dtype;
  MaskKind mask;  // normalised
  bool softcap;
  int head_dim_qk, head_dim_v;
  KernelConfig requested;
  // Zero (and -1 for the window) when `requested` is complete.
  int64_t gqa_ratio = 0;
  int64_t window_left = -1, window_right = -1;
  int seqlen_q_bucket = 0, seqlen_k_bucket = 0, batch_heads_bucket = 0;
  bool operator==(const CallKey &) const = default;

  static CallKey make(int ordinal, const Problem &p, const KernelConfig &requested) {
    CallKey k{ordinal, p.dtype, normalized_mask(p), p.softcap != 0, p.head_dim_qk,
              p.head_dim_v, requested};
    if (requested.is_complete()) return k;
    k.gqa_ratio = p.heads_q / p.heads_kv;
    if (k.mask == MaskKind::window) {
      k.window_left = p.window_left;
      k.window_right = p.window_right;
    }
    k.seqlen_q_bucket = size_bucket(p.seqlen_q);
    k.seqlen_k_bucket = size_bucket(p.seqlen_k);
    k.batch_heads_bucket = size_bucket(p.batch * p.heads_q);
    return k;
  }
};

struct CallKeyHash {
  size_t operator()(const CallKey &k) const {
    const KernelConfig &c = k.requested;
    return llvm::hash_combine(k.ordinal, int(k.dtype), int(k.mask), k.softcap, k.head_dim_qk,
                              k.head_dim_v, int(c.path), c.block_m, c.block_n, c.warps, c.stages,
                              c.deterministic, k.gqa_ratio, k.window_left, k.window_right,
                              k.seqlen_q_bucket, k.seqlen_k_bucket, k.batch_heads_bucket);
  }
};

// Attribute queries cost microseconds each; a backward call needs only the
// device's target and shared memory, the same for the whole process.
llvm::Expected<DeviceInfo> cached_device(int ordinal) {
  static std::mutex mutex;
  static auto *devices = new llvm::DenseMap<int, DeviceInfo>;
  std::lock_guard lock(mutex);
  if (auto it = devices->find(ordinal); it != devices->end()) return it->second;
  auto info = query_device(ordinal);
  if (!info) return info.takeError();
  devices->try_emplace(ordinal, *info);
  return *info;
}

}  // namespace

llvm::Expected<ChosenConfig> choose_backward_config(const Problem &problem,
                                                    const KernelConfig &requested,
                                                    const DeviceInfo &device, TuningDb *db) {
  const TargetArch arch = device.target();
  const int max_smem = device.max_smem_per_block_optin;
  PassRules rules;
  rules.class_pass = class_pass(Pass::backward, requested.deterministic);
  rules.validate = [&](const KernelConfig &config) {
    return make_backward_spec(problem, config, arch, max_smem).takeError();
  };
  rules.heuristic = [&](const KernelConfig &partial) {
    return default_backward_config(problem, arch, max_smem, partial);
  };
  return choose_config(problem, requested, device, db, rules);
}

llvm::Expected<ChosenConfig> explain_backward_config(const Problem &problem,
                                                     const KernelConfig &requested,
                                                     const DeviceInfo &device) {
  return choose_backward_config(problem, requested, device, process_tuning_db());
}

llvm::Expected<KernelSpec> backward_spec_for_call(const Problem &problem,
                                                  const KernelConfig &requested, int ordinal) {
  static std::mutex mutex;
  static auto *specs = new std::unordered_map<CallKey, KernelSpec, CallKeyHash>;
  const CallKey key = CallKey::make(ordinal, problem, requested);
  {
    std::lock_guard lock(mutex);
    if (auto it = specs->find(key); it != specs->end()) return it->second;
  }
  auto device = cached_device(ordinal);
  if (!device) return device.takeError();
  auto chosen = choose_backward_config(problem, requested, *device, process_tuning_db());
  if (!chosen) return chosen.takeError();
  auto spec = make_backward_spec(problem, chosen->config, device->target(),
                                 device->max_smem_per_block_optin);
  if (!spec) return spec.takeError();
  // Invalid requests are not remembered: they fail again, with their error.
  std::lock_guard lock(mutex);
  return specs->try_emplace(key, std::move(*spec)).first->second;
}

}  // namespace flashjit
