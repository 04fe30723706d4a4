// The flags that compile a caller's modifiers (include/flashjit/modifiers.h)
// into the kernels of gen and compile (either pass), and name the class
// `query` looks up (their hash is part of it): --score-mod FILE,
// --score-mod-grad FILE (the backward's),
// --mask-mod FILE, --aux "const float* slopes, int prefix", --mask-mod-qk-only
// (=false: a block map per batch and head; without it flashjit finds out),
// --sinks (learned attention sinks, built in). A backward's score_mod_grad
// may also be defined in the --score-mod file itself.
#pragma once

#include <string>

#include "cli/cli_common.h"
#include "llvm/Support/CommandLine.h"

namespace flashjit {
class TuningDb;
}  // namespace flashjit

namespace flashjit::cli {

struct ModifierOptions {
  ModifierOptions(llvm::cl::OptionCategory &category, llvm::cl::SubCommand &sub);
  llvm::cl::opt<std::string> score_mod, score_mod_grad, mask_mod, aux;
  llvm::cl::opt<bool> mask_mod_qk_only, sinks;

  // Reads the files and the declarations into `kernel`'s spec, as a call
  // on its target compiles them (resolve_modifiers); a usage error (code
  // kExitUsage) names the flag and what was expected.
  llvm::Error apply(ResolvedKernel &kernel, int &code) const;
  // The same for a pass without a kernel yet (none given: empty), with
  // mask_mod_qk_only as given (`automatic` without the flag); every error
  // is a usage error. A backward's score_mod needs its derivative, given
  // or in its file (not both): found by a probe compile, without a GPU.
  llvm::Expected<Modifiers> read(Pass pass) const;
  // Whether any of the flags is set (nothing read).
  bool given() const;
};

// Which block maps a call with `modifiers` (as given: read()) builds on
// `arch`, and why, for a report ("" without a mask_mod): "one for every batch and head (mask_mod
// reads neither b nor h on sm_90a)", "one per batch and head (mask_mod
// reads b on sm_90a)", or the flag that decided.
llvm::Expected<std::string> block_map_text(const Modifiers &modifiers, const TargetArch &arch,
                                           TuningDb *db = nullptr);

}  // namespace flashjit::cli
