// The subcommands. Each owns its llvm::cl::SubCommand and its own flags and
// is constructed in main() (see ProblemOptions for why not as globals).
#pragma once

#include <string>

#include "cli/cli_common.h"
#include "llvm/Support/CommandLine.h"

namespace flashjit::cli {

struct InfoCommand {
  llvm::cl::SubCommand sub{"info", "Show the GPU, driver, NVRTC, templates hash and database"};
  int run(const CommonOptions &common) const;
};

struct GenCommand {
  explicit GenCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"gen", "Print the generated kernel source"};
  llvm::cl::opt<bool> expanded;
  llvm::cl::opt<std::string> arch;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

struct CompileCommand {
  explicit CompileCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"compile", "Compile the kernel to a cubin and report its resources"};
  llvm::cl::opt<std::string> arch;
  llvm::cl::opt<std::string> output;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

struct RunCommand {
  explicit RunCommand(llvm::cl::OptionCategory &category);
  llvm::cl::SubCommand sub{"run", "Run the forward pass on the GPU: time it, optionally check it"};
  llvm::cl::opt<bool> check;
  llvm::cl::opt<int> warmup;
  llvm::cl::opt<int> repeats;
  llvm::cl::opt<unsigned> seed;
  int run(const CommonOptions &common, const ProblemOptions &problem) const;
};

}  // namespace flashjit::cli
