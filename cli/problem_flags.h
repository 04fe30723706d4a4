// The problem and kernel-config flags shared by `gen`, `compile` and `run`,
// as a pure function from the flags' text to a validated Problem and a
// (possibly partial) KernelConfig, so every message is unit-tested.
#pragma once

#include <string>
#include <vector>

#include "flashjit/problem.h"
#include "generator/kernel_spec.h"
#include "llvm/Support/Error.h"

namespace flashjit::cli {

// The flags as typed. An empty optional field means "not given".
struct ProblemFlagValues {
  std::string dtype = "bf16";
  std::string kv_dtype = "same";   // --kv-dtype same|e4m3 (an fp8 KV cache)
  std::string out_dtype = "auto";  // --out-dtype auto|bf16|fp16
  std::string batch = "2";
  std::string heads = "16";
  std::string heads_kv;  // default: --heads
  std::string seqlen = "8192";
  std::string seqlen_q;  // default: --seqlen
  std::string seqlen_k;  // default: --seqlen
  std::string hdim = "128";
  std::string hdim_v;  // default: --hdim
  std::string mask = "none";
  bool causal = false;  // --causal, the same as --mask causal
  std::string attention_chunk = "0";  // --attention-chunk C (0: off)
  std::string softcap = "0";
  std::string scale = "0";
  std::string page_size = "0";  // --page-size: K/V in pages of N rows (0: contiguous)
  bool cache_seqlens = false;   // --cache-seqlens: per-sequence key counts (a KV cache)
  bool varlen = false;          // --varlen: a packed batch of sequences
  std::string seqlens_q;        // --seqlens-q N,N,...: each sequence's queries (with --varlen)
  std::string seqlens_k;        // --seqlens-k: each sequence's keys (default --seqlens-q)
  std::string sizes_given;      // the first of --batch/--seqlen/--seqlen-q/--seqlen-k given
  std::string path = "sm80";
  std::string block_m = "0";
  std::string block_n = "0";
  std::string warps = "0";
  std::string stages = "0";
  std::string splits = "0";      // --splits (forward only)
  std::string pack_gqa = "auto";  // --pack-gqa auto|on|off (forward only)
  std::string pass = "fwd";
  bool deterministic = false;  // --deterministic (backward only)
};

struct ParsedProblem {
  Problem problem;
  KernelConfig config;  // zero fields: the heuristic picks
  Pass pass = Pass::forward;
  // A packed batch's lengths (--seqlens-q/--seqlens-k; empty: not given) and
  // its totals (0: unknown, --varlen with --batch and --seqlen only).
  std::vector<int64_t> seqlens_q, seqlens_k;
  int64_t total_q = 0, total_k = 0;
};

// Fails with one line naming the flag, what it allows and what it got, e.g.
// "--hdim: expected a multiple of 8 in [8, 576], got 100"; then runs the
// generator's validate_problem, whose message comes back unchanged.
llvm::Expected<ParsedProblem> parse_problem_flags(const ProblemFlagValues &values);

}  // namespace flashjit::cli
