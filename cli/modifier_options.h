// The flags that compile a caller's modifiers (include/flashjit/modifiers.h)
// into the kernels of gen and compile (either pass), and name the class
// `query` looks up (their hash is part of it): --score-mod FILE,
// --score-mod-grad FILE (the backward's),
// --mask-mod FILE, --aux "const float* slopes, int prefix", --mask-mod-qk-only,
// --sinks (learned attention sinks, built in).
#pragma once

#include <string>

#include "cli/cli_common.h"
#include "llvm/Support/CommandLine.h"

namespace flashjit::cli {

struct ModifierOptions {
  ModifierOptions(llvm::cl::OptionCategory &category, llvm::cl::SubCommand &sub);
  llvm::cl::opt<std::string> score_mod, score_mod_grad, mask_mod, aux;
  llvm::cl::opt<bool> mask_mod_qk_only, sinks;

  // Reads the files and the declarations into `kernel`'s spec;
  // a usage error (code kExitUsage) names the flag and what was expected.
  llvm::Error apply(ResolvedKernel &kernel, int &code) const;
  // The same for a pass without a kernel yet (none given: empty); every
  // error is a usage error.
  llvm::Expected<Modifiers> read(Pass pass) const;
  // Whether any of the flags is set (nothing read).
  bool given() const;
};

}  // namespace flashjit::cli
