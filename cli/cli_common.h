// What the subcommands share: exit codes, the one-line error format, the
// problem/config flags bound to llvm::cl, and problem -> kernel spec.
#pragma once

#include <string>
#include <vector>

#include "cli/problem_flags.h"
#include "generator/kernel_spec.h"
#include "reference/accuracy.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace flashjit::cli {

enum ExitCode : int { kExitOk = 0, kExitFailure = 1, kExitUsage = 2 };

// Prints "flashjit: error: <message>" to stderr and returns `code`.
int report_error(int code, const llvm::Twine &message);
int report_error(int code, llvm::Error error);

// The subcommands an option belongs to, as one llvm::cl modifier: the
// shared flags are declared once and given to every command that takes them.
struct Subs {
  std::vector<llvm::cl::SubCommand *> list;
  template <class Opt>
  void apply(Opt &option) const {
    for (llvm::cl::SubCommand *sub : list) option.addSubCommand(*sub);
  }
};

// Options live in main()'s frame rather than as globals: a cl::opt naming a
// SubCommand must be constructed after it, which static initialisation
// across files cannot promise. The problem flags (with --pass and
// --deterministic, which pick the class) go to `problem_subs`, the
// kernel-config flags (--path, --block-m, ...) only to `config_subs`: tune,
// precompile and query choose the config themselves.
struct ProblemOptions {
  ProblemOptions(llvm::cl::OptionCategory &category, const Subs &problem_subs,
                 const Subs &config_subs);
  ProblemFlagValues values() const;
  // The first problem flag given on the command line ("--hdim"), or "".
  std::string first_given() const;

  llvm::cl::opt<std::string> dtype, kv_dtype, out_dtype, batch, heads, heads_kv, seqlen, seqlen_q, seqlen_k, hdim,
      hdim_v, mask, attention_chunk;
  llvm::cl::opt<bool> causal;
  llvm::cl::opt<std::string> softcap, scale, page_size;
  llvm::cl::opt<bool> cache_seqlens;
  llvm::cl::opt<bool> varlen;
  llvm::cl::opt<std::string> seqlens_q, seqlens_k;
  llvm::cl::opt<std::string> path, block_m, block_n, warps, stages, splits, pack_gqa, pass;
  llvm::cl::opt<bool> deterministic;
};

// Flags every subcommand takes.
struct CommonOptions {
  CommonOptions(llvm::cl::OptionCategory &category, const Subs &json_subs);
  llvm::cl::opt<bool> json;
};

struct ResolvedKernel {
  Problem problem;
  KernelSpec spec;
  int max_smem_bytes = 0;  // the device's opt-in limit, or 0 (the arch's)
  bool device_matches = false;  // a GPU of spec.arch is present
  std::string device_note;      // why there is no usable GPU, when there is none
};

// Parses the problem flags, picks the target (`arch_flag`, else the GPU's),
// completes the config with the heuristic and validates it. On failure
// `exit_code` says whose fault it was: kExitUsage for flags, problems and
// configs the generator rejects, kExitFailure for a missing GPU or driver.
// `modified`: the caller gives modifiers (the backward's heuristic then
// keeps one stage, as a call's does).
llvm::Expected<ResolvedKernel> resolve_kernel(const ProblemOptions &options,
                                              llvm::StringRef arch_flag, int &exit_code,
                                              bool modified = false);

void print_json(const llvm::json::Value &value);
llvm::json::Object problem_json(const Problem &problem);
llvm::json::Object config_json(const KernelConfig &config);
// A forward check's result (run --check), as `run --json` reports it.
llvm::json::Object accuracy_json(const AccuracyReport &report);

}  // namespace flashjit::cli
