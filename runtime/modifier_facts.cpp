#include "runtime/modifier_facts.h"

#include <atomic>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <utility>

#include "generator/modifier_source.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit {

namespace {

std::atomic<uint64_t> &probe_compiles() {
  static std::atomic<uint64_t> *count = new std::atomic<uint64_t>(0);
  return *count;
}

// The findings of one kind of probe, by the probed text's hash and the
// target. A miss compiles under the exclusive lock, so concurrent first
// calls compile the probe once; errors are not kept (a call that fails
// fails again, with its error).
template <class Finding>
class ProbeCache {
 public:
  template <class Probe>
  llvm::Expected<Finding> get(uint64_t hash, const std::string &arch, Probe &&probe) {
    const auto key = std::make_pair(hash, arch);
    {
      std::shared_lock lock(mutex_);
      if (auto it = findings_.find(key); it != findings_.end()) return it->second;
    }
    std::unique_lock lock(mutex_);
    if (auto it = findings_.find(key); it != findings_.end()) return it->second;
    llvm::Expected<Finding> found = probe();
    if (!found) return found.takeError();
    probe_compiles().fetch_add(1, std::memory_order_relaxed);
    return findings_.emplace(key, *found).first->second;
  }

 private:
  std::shared_mutex mutex_;
  std::map<std::pair<uint64_t, std::string>, Finding> findings_;
};

template <class Finding>
ProbeCache<Finding> &cache() {
  static auto *probes = new ProbeCache<Finding>;  // never destroyed: used until exit
  return *probes;
}

// The probe's PTX as text.
llvm::Expected<std::string> probe_ptx(const GeneratedSource &source, const TargetArch &arch) {
  auto ptx = compile_to_ptx(source, arch);
  if (!ptx) return ptx.takeError();
  return std::string(ptx->bytes.begin(), ptx->bytes.end());
}

llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

}  // namespace

llvm::Expected<bool> score_mod_defines_grad(const Modifiers &modifiers) {
  if (modifiers.score_mod.empty()) return false;
  const TargetArch sm80{8, 0, false};
  const Modifiers probed = score_mod_grad_probed(modifiers);
  return cache<bool>().get(modifiers_hash_value(probed), sm80.name(),
                           [&]() -> llvm::Expected<bool> {
                             auto ptx = probe_ptx(generate_score_mod_grad_probe(probed), sm80);
                             if (!ptx) return ptx.takeError();
                             return read_score_mod_grad_probe(*ptx);
                           });
}

llvm::Expected<MaskModReads> mask_mod_reads(const Modifiers &modifiers, const TargetArch &arch) {
  if (modifiers.mask_mod.empty()) return MaskModReads{};
  const Modifiers probed = mask_mod_probed(modifiers);
  return cache<MaskModReads>().get(modifiers_hash_value(probed), arch.name(),
                                   [&]() -> llvm::Expected<MaskModReads> {
                                     auto ptx = probe_ptx(generate_mask_mod_probe(probed), arch);
                                     if (!ptx) return ptx.takeError();
                                     return read_mask_mod_probe(*ptx);
                                   });
}

llvm::Error check_score_mod_grad(const Modifiers &modifiers) {
  if (modifiers.score_mod.empty()) return llvm::Error::success();
  auto defined = score_mod_defines_grad(modifiers);
  if (!defined) return defined.takeError();
  if (*defined && !modifiers.score_mod_grad.empty())
    return error(
        "score_mod_grad is given apart and the score_mod's source defines one too: give one of "
        "them (neither replaces the other)");
  if (!*defined && modifiers.score_mod_grad.empty())
    return error(score_mod_grad_missing(modifiers));
  return llvm::Error::success();
}

llvm::Expected<Modifiers> resolve_modifiers(const Modifiers &modifiers, Pass pass,
                                            const TargetArch &arch) {
  if (pass == Pass::backward)
    if (llvm::Error e = check_score_mod_grad(modifiers)) return e;
  Modifiers out = modifiers;
  if (out.mask_mod.empty() || out.mask_mod_qk_only != MaskModQkOnly::automatic) return out;
  auto reads = mask_mod_reads(modifiers, arch);
  if (!reads) return reads.takeError();
  out.mask_mod_qk_only = reads->qk_only() ? MaskModQkOnly::on : MaskModQkOnly::off;
  return out;
}

uint64_t modifier_probe_compiles() { return probe_compiles().load(std::memory_order_relaxed); }

}  // namespace flashjit
