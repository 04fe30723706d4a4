// The subcommands. Each owns its llvm::cl::SubCommand and its own flags and
// is constructed in main() (see ProblemOptions for why not as globals).
#pragma once

#include <string>

#include "cli/cli_common.h"
#include "cli/modifier_options.h"
#include "llvm/Support/CommandLine.h"

namespace flashjit::cli {

// --db: the tuning database these commands read or write.
struct DbPathOption {
  DbPathOption(llvm::cl::OptionCategory &category, const Subs &subs);
  llvm::cl::opt<std::string> db;
};

// --db-trust=owner|group: who besides this user and root may write a
// database whose cubins are loaded (cache/db_trust.h). It sets
// $FLASHJIT_DB_TRUST, so that the library and the tuner's workers read
// the same scope.
struct DbTrustOption {
  DbTrustOption(llvm::cl::OptionCategory &category, const Subs &subs);
  // Validates the flag and exports it; an error for a value that is not a scope.
  llvm::Error apply() const;
  llvm::cl::opt<std::string> scope;
};

struct InfoCommand {
  llvm::cl::SubCommand sub{"info", "Show the GPU, driver, NVRTC, templates hash and database"};
  int run(const CommonOptions &common, const DbPathOption &db) const;
};

struct GenCommand {
  explicit GenCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"gen", "Print the generated kernel source"};
  llvm::cl::opt<bool> expanded;
  llvm::cl::opt<std::string> arch;
  ModifierOptions modifiers;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

struct CompileCommand {
  explicit CompileCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"compile", "Compile the kernel to a cubin and report its resources"};
  llvm::cl::opt<std::string> arch;
  llvm::cl::opt<std::string> output;
  ModifierOptions modifiers;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

struct RunCommand {
  explicit RunCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"run", "Run the forward pass on the GPU: time it, optionally check it"};
  llvm::cl::opt<bool> check;
  llvm::cl::opt<int> warmup;
  llvm::cl::opt<int> repeats;
  llvm::cl::opt<unsigned> seed;
  ModifierOptions modifiers;  // the dense forward's; run_modifiers.h makes their inputs
  llvm::cl::list<std::string> aux_values;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

struct TuneCommand {
  explicit TuneCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"tune", "Tune problem classes on the GPU(s) and store the winners"};
  llvm::cl::opt<std::string> plan;
  llvm::cl::opt<std::string> budget_s;
  llvm::cl::opt<std::string> devices;
  llvm::cl::opt<bool> force;
  llvm::cl::opt<std::string> candidate_timeout_s;
  ModifierOptions modifiers;  // compiled into every candidate, part of the stored class
  llvm::cl::list<std::string> aux_values;  // the scalar aux fields' values the tune runs with
  int run(const CommonOptions &common, const ProblemOptions &problem,
          const DbPathOption &db) const;
};

struct PrecompileCommand {
  explicit PrecompileCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"precompile",
                           "Compile every candidate for a GPU into the cubin store (no GPU needed)"};
  llvm::cl::opt<std::string> arch;
  llvm::cl::opt<std::string> plan;
  llvm::cl::opt<int> threads;
  ModifierOptions modifiers;  // compiled into every candidate of the flags' problem
  int run(const CommonOptions &common, const ProblemOptions &problem,
          const DbPathOption &db) const;
};

struct QueryCommand {
  explicit QueryCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"query", "Show the config a problem gets, and why"};
  llvm::cl::opt<std::string> arch;
  llvm::cl::opt<std::string> device_name;
  ModifierOptions modifiers;  // part of the class: a modified call's own tunings
  int run(const CommonOptions &common, const ProblemOptions &problem,
          const DbPathOption &db) const;
};

struct DbCommand {
  explicit DbCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{
      "db", "The tuning database: list | export FILE | import FILE | verify | prune"};
  llvm::cl::list<std::string> args;
  llvm::cl::opt<bool> with_cubins;
  llvm::cl::opt<bool> accept_cubins;
  llvm::cl::opt<bool> verify;
  llvm::cl::opt<bool> no_verify;
  llvm::cl::opt<std::string> sample;
  llvm::cl::opt<bool> repair;
  llvm::cl::opt<std::string> threads;
  llvm::cl::opt<std::string> unused_days;
  int run(const CommonOptions &common, const DbPathOption &db) const;
};

// The tuner's hidden worker mode (`flashjit worker ...`, argv[1] == "worker"),
// dispatched before the command line is parsed so that it stays out of
// --help; see cli/worker_command.cpp.
int run_worker(int argc, char **argv);

}  // namespace flashjit::cli
