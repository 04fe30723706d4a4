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
// softcap, scale, name. Errors name the file, line and key.
#pragma once

#include <string>
#include <vector>

#include "flashjit/problem.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct PlanEntry {
  std::string name;  // given, or describe(problem)
  Problem problem;
  int line = 0;  // in the plan file, for messages
};

struct TuningPlan {
  std::string name;
  std::string file;
  std::vector<PlanEntry> entries;
};

llvm::Expected<TuningPlan> load_plan(llvm::StringRef file);
// The same from text (tests, fuzzing); `file` only names it in messages.
llvm::Expected<TuningPlan> parse_plan(llvm::StringRef text, llvm::StringRef file);

}  // namespace flashjit
