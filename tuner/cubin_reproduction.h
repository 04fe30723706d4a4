// Verification by reproduction: a stored cubin is checked by regenerating
// its program from what its row records (the kernel id, the arch, the
// NVRTC version), recompiling it here and comparing the bytes
// (runtime/cubin_comparison.h). A cubin that reproduces is exactly what
// this flashjit would have compiled for the key it is stored under, so
// loading it is no different from compiling it; one that differs was
// changed after it was compiled, whatever its blob_sha256 says. A row that
// lacks what its program needs (a caller's modifiers, of which the id
// holds only a hash), or that this build cannot recompile to the same key
// (another NVRTC, other templates, an edited id), cannot be verified, and
// is never counted as verified.
#pragma once

#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "generator/source.h"
#include "llvm/Support/Error.h"

namespace flashjit {

enum class Reproduction { reproduced, differs, unverifiable };
const char *to_string(Reproduction outcome);  // "reproduced" | "differs" | "cannot verify"

struct ReproductionResult {
  Reproduction outcome = Reproduction::unverifiable;
  // reproduced: "identical", or what the comparison left out; differs:
  // what differs; unverifiable: why not.
  std::string detail;
  std::vector<char> rebuilt;  // this machine's cubin, where it compiled
};

// The program `row` names, as this build generates it, or why it cannot
// (an error whose message says what is missing). The row's key is not
// checked here.
llvm::Expected<GeneratedSource> regenerate_program(const CubinRecord &row);

// Regenerates, checks the key, recompiles (NVRTC here must be the row's
// version) and compares with the row's bytes. Thread-safe: many rows may be
// reproduced at once.
ReproductionResult reproduce_cubin(const CubinRecord &row);

}  // namespace flashjit
