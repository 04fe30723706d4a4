#include "runtime/modifier_facts.h"

#include <atomic>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <utility>

#include "cache/tuning_db.h"
#include "generator/modifier_source.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit {

namespace {

std::atomic<uint64_t> &probe_compiles() {
  static std::atomic<uint64_t> *count = new std::atomic<uint64_t>(0);
  return *count;
}

// A finding as the database keeps it (TuningDb::put_snippet_fact), and
// back; nullopt for text this build did not write.
std::string encode(bool defined) { return defined ? "1" : "0"; }
std::string encode(const MaskModReads &reads) {
  return std::string("b=") + (reads.b ? "1" : "0") + " h=" + (reads.h ? "1" : "0");
}
std::optional<bool> decode(llvm::StringRef text, bool *) {
  if (text == "1") return true;
  if (text == "0") return false;
  return std::nullopt;
}
std::optional<MaskModReads> decode(llvm::StringRef text, MaskModReads *) {
  for (const MaskModReads reads : {MaskModReads{false, false}, MaskModReads{true, false},
                                   MaskModReads{false, true}, MaskModReads{true, true}})
    if (text == encode(reads)) return reads;
  return std::nullopt;
}

// The findings of one kind of probe, by the probed text's hash and the
// target. A miss asks `db` (a precompiled database answers a fresh
// process without NVRTC), else compiles under the exclusive lock, so
// concurrent first calls compile the probe once, and keeps the finding in
// `db`. The database is a cache here: its errors cost a probe, never the
// call. Errors are not kept (a call that fails fails again, with its error).
template <class Finding>
class ProbeCache {
 public:
  template <class Probe>
  llvm::Expected<Finding> get(uint64_t hash, const std::string &arch, TuningDb *db,
                              const std::string &db_key, Probe &&probe) {
    const auto key = std::make_pair(hash, arch);
    {
      std::shared_lock lock(mutex_);
      if (auto it = findings_.find(key); it != findings_.end()) return it->second;
    }
    std::unique_lock lock(mutex_);
    if (auto it = findings_.find(key); it != findings_.end()) return it->second;
    if (db) {
      auto stored = db->get_snippet_fact(db_key);
      if (!stored) {
        llvm::consumeError(stored.takeError());
      } else if (*stored) {
        if (std::optional<Finding> known = decode(**stored, static_cast<Finding *>(nullptr)))
          return findings_.emplace(key, *known).first->second;
      }
    }
    llvm::Expected<Finding> found = probe();
    if (!found) return found.takeError();
    probe_compiles().fetch_add(1, std::memory_order_relaxed);
    if (db) llvm::consumeError(db->put_snippet_fact(db_key, encode(*found)));
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

// A finding's key in the database: the probe, the probed text's hash and
// the target.
std::string fact_key(const char *probe, const Modifiers &probed, const std::string &arch) {
  return std::string(probe) + ":" + modifiers_hash(probed) + ":" + arch;
}

llvm::Error error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

}  // namespace

llvm::Expected<bool> score_mod_defines_grad(const Modifiers &modifiers, TuningDb *db) {
  if (modifiers.score_mod.empty()) return false;
  const TargetArch sm80{8, 0, false};
  const Modifiers probed = score_mod_grad_probed(modifiers);
  return cache<bool>().get(modifiers_hash_value(probed), sm80.name(), db,
                           fact_key("score_mod_grad", probed, sm80.name()),
                           [&]() -> llvm::Expected<bool> {
                             auto ptx = probe_ptx(generate_score_mod_grad_probe(probed), sm80);
                             if (!ptx) return ptx.takeError();
                             return read_score_mod_grad_probe(*ptx);
                           });
}

llvm::Expected<MaskModReads> mask_mod_reads(const Modifiers &modifiers, const TargetArch &arch,
                                            TuningDb *db) {
  if (modifiers.mask_mod.empty()) return MaskModReads{};
  const Modifiers probed = mask_mod_probed(modifiers);
  return cache<MaskModReads>().get(modifiers_hash_value(probed), arch.name(), db,
                                   fact_key("mask_mod_reads", probed, arch.name()),
                                   [&]() -> llvm::Expected<MaskModReads> {
                                     auto ptx = probe_ptx(generate_mask_mod_probe(probed), arch);
                                     if (!ptx) return ptx.takeError();
                                     return read_mask_mod_probe(*ptx);
                                   });
}

llvm::Error check_score_mod_grad(const Modifiers &modifiers, TuningDb *db) {
  if (modifiers.score_mod.empty()) return llvm::Error::success();
  auto defined = score_mod_defines_grad(modifiers, db);
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
                                            const TargetArch &arch, TuningDb *db) {
  if (pass == Pass::backward)
    if (llvm::Error e = check_score_mod_grad(modifiers, db)) return e;
  Modifiers out = modifiers;
  if (out.mask_mod.empty() || out.mask_mod_qk_only != MaskModQkOnly::automatic) return out;
  auto reads = mask_mod_reads(modifiers, arch, db);
  if (!reads) return reads.takeError();
  out.mask_mod_qk_only = reads->qk_only() ? MaskModQkOnly::on : MaskModQkOnly::off;
  return out;
}

uint64_t modifier_probe_compiles() { return probe_compiles().load(std::memory_order_relaxed); }

}  // namespace flashjit
