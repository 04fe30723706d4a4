// Tuning plans: YAML lists of problem classes with shared defaults.
//
//   name: llama3-8b
//   defaults: {dtype: bf16, heads: 32, heads_kv: 8, hdim: 128, mask: causal}
//   problems:
//     - {seqlen: 2048, batch: 8}
//     - {seqlen: 8192, batch: 2}
//     - {seqlen_q: 1, seqlen_k: 8192, batch: 16, mask: none}
//
// Keys: dtype, batch, heads, heads_kv, seqlen (or seqlen_q and seqlen_k),
// hdim, hdim_v, mask (none | causal | window), window: [left, right],
// softcap, scale, name; and which passes to tune, each its own class:
// pass: fwd | bwd, or passes: [fwd, bwd] (one entry per pass, in that
// order; default fwd), deterministic: true (the backward's deterministic
// mode instead of its default); a KV cache for the forward: page_size (0:
// contiguous, else 1 to 512 rows; seqlen_k is the cache's
// capacity) and cache_seqlens: true (per-sequence key counts); a packed
// batch (flash_attn_varlen_func): varlen: true, with seqlens_q: [17, 4096,
// 300] (and seqlens_k, default the same), which give the batch, the longest
// lengths and the totals (an entry with them takes no batch or seqlen*;
// the defaults' are not used for it), or with batch and seqlen as the
// longest; a caller's modifiers: score_mod, score_mod_grad and mask_mod (CUDA
// source files, relative to the plan's folder), aux ("const float* slopes,
// int prefix"), aux_values ({prefix: 1024}: what a tune runs the scalar
// fields with), mask_mod_qk_only (true or false; absent: flashjit finds
// out) and sinks (true or false). A backward's score_mod needs its
// derivative, key score_mod_grad or defined in the score_mod's own file.
// Errors name the file, line and key.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "reference/packed_batch.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct PlanEntry {
  std::string name;  // given, or describe(problem); " (bwd)" appended for the backward
  Problem problem;
  int line = 0;  // in the plan file, for messages
  Pass pass = Pass::forward;
  bool deterministic = false;  // backward only
  // A packed batch's lengths (varlen: true with seqlens_q/seqlens_k; empty
  // otherwise) and totals (0: unknown, varlen with batch and seqlen only).
  std::vector<int64_t> seqlens_q, seqlens_k;
  int64_t total_q = 0, total_k = 0;
  // A caller's modifiers, compiled into the entry's kernels (none: empty),
  // and the values of their scalar aux fields a tune runs them with
  // ("NAME=VALUE", key aux_values).
  Modifiers modifiers;
  std::vector<std::string> aux_values;
};

// The packed batch a tune of `entry` times: its lengths, or every sequence
// the longest when only the batch and the longest lengths were given
// (equal_lengths); none for a dense problem.
std::optional<PackedBatch> entry_packed_batch(const PlanEntry &entry);

// " (bwd)", " (bwd-det)", or "" for the forward: what tells the entries of
// one problem's passes apart in names and tables.
std::string pass_suffix(Pass pass, bool deterministic);

struct TuningPlan {
  std::string name;
  std::string file;
  std::vector<PlanEntry> entries;
};

llvm::Expected<TuningPlan> load_plan(llvm::StringRef file);
// The same from text (tests, fuzzing); `file` only names it in messages.
llvm::Expected<TuningPlan> parse_plan(llvm::StringRef text, llvm::StringRef file);

}  // namespace flashjit
