// --aux's declarations of a caller's modifier inputs (cli/modifier_options.h).
#pragma once

#include <vector>

#include "flashjit/modifiers.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit::cli {

// "const float* slopes, int prefix" as fields (types with their spaces
// normalised: "const float *" is "const float*"); an error names the
// declaration that is not "TYPE NAME".
llvm::Expected<std::vector<AuxField>> parse_aux_declarations(llvm::StringRef text);

}  // namespace flashjit::cli
