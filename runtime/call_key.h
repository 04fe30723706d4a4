// What selects the kernel of a call (forward or backward): the compiled
// code's parameters, the caller's requested config, where it runs (a context
// or a device), and, when the config is left to flashjit, the rest of the
// tuning database's problem class (GQA ratio, window bounds, size buckets),
// since a tuning may pick another config for another bucket. A complete
// config that leaves splits or pack_gqa to the heuristic still keys on the
// GQA ratio and the buckets: their heuristic reads the problem's sizes. Repeat calls
// then skip the database, the heuristic, the spec and its ID string: one
// hash lookup. Plain integers, not problem_class_key()'s strings, so
// building the key allocates nothing.
#pragma once

#include <cstdint>

#include "flashjit/kernel_config_fields.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "llvm/ADT/Hashing.h"
#include "runtime/tuning_key.h"

namespace flashjit {

struct CallKey {
  uintptr_t owner;  // the CUcontext, or the device ordinal
  DType dtype;
  MaskKind mask;  // normalised
  bool softcap;
  int head_dim_qk, head_dim_v;
  KernelConfig requested;
  // The KV cache's layout: compiled into the kernel (KernelSpec).
  bool seqused_k = false;
  int page_size = 0;
  bool varlen = false;  // a packed batch: compiled into the kernel too
  // The caller's modifiers (call_modifiers_key; 0: none): compiled into
  // the kernel.
  uint64_t modifiers = 0;
  // K's and V's elements and O's (kv_element, out_element): an fp8 cache and
  // the output type are compiled into the kernel.
  DType kv_element = DType::bf16, out_element = DType::bf16;
  // Zero (and -1 for the window) when `requested` is complete; the window
  // stays -1 when only splits or pack_gqa are open (the database is not
  // consulted then either).
  int64_t gqa_ratio = 0;
  int64_t window_left = -1, window_right = -1;
  int attention_chunk = 0;  // compiled in (ChunkedMask) and its own tuning class
  bool v_in_k = false;  // V a view of K's first columns (KernelSpec::v_in_k)
  int seqlen_q_bucket = 0, seqlen_k_bucket = 0, batch_heads_bucket = 0;
  bool operator==(const CallKey &) const = default;

  static CallKey make(uintptr_t owner, const Problem &p, const KernelConfig &requested,
                      uint64_t modifiers = 0) {
    CallKey k{owner,         p.dtype,      normalized_mask(p), p.softcap != 0,
              p.head_dim_qk, p.head_dim_v, requested,          p.seqused_k,
              p.page_size,   p.varlen,     modifiers};
    k.kv_element = flashjit::kv_element(p);
    k.out_element = flashjit::out_element(p);
    k.attention_chunk = p.attention_chunk;
    const bool sized_heuristic =
        requested.splits == 0 || requested.pack_gqa == GqaPacking::automatic;
    if (requested.is_complete() && !sized_heuristic) return k;  // nothing left to choose
    k.gqa_ratio = p.heads_q / p.heads_kv;
    k.seqlen_q_bucket = size_bucket(p.seqlen_q);
    k.seqlen_k_bucket = size_bucket(p.seqlen_k);
    k.batch_heads_bucket = size_bucket(p.batch * p.heads_q);
    if (requested.is_complete()) return k;  // the database is not consulted
    if (k.mask == MaskKind::window) {
      k.window_left = p.window_left;
      k.window_right = p.window_right;
    }
    return k;
  }
};

// The modifiers' part of a call's key (CallKey::modifiers): their hash,
// told apart where mask_mod_qk_only is left to the probe, since `automatic`
// hashes as `off` (one kernel until resolved) but may resolve to `on`.
inline uint64_t call_modifiers_key(const Modifiers &modifiers) {
  const uint64_t hash = modifiers_hash_value(modifiers);
  if (modifiers.mask_mod.empty() || modifiers.mask_mod_qk_only != MaskModQkOnly::automatic)
    return hash;
  return static_cast<uint64_t>(llvm::hash_combine(hash, "mask_mod_qk_only automatic"));
}

struct CallKeyHash {
  size_t operator()(const CallKey &k) const {
    llvm::hash_code hash = llvm::hash_combine(
        k.owner, k.dtype, k.mask, k.softcap, k.head_dim_qk, k.head_dim_v, k.seqused_k, k.page_size,
        k.varlen, k.modifiers, k.kv_element, k.out_element, k.gqa_ratio, k.window_left,
        k.window_right, k.attention_chunk, k.v_in_k, k.seqlen_q_bucket, k.seqlen_k_bucket,
        k.batch_heads_bucket);
    // Every field of the requested config (operator== compares them all).
    for_each_kernel_config_field([&](const auto &field) {
      hash = llvm::hash_combine(hash, k.requested.*field.member);
    });
    return hash;
  }
};

}  // namespace flashjit
