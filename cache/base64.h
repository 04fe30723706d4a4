// Base64 (RFC 4648, standard alphabet, '=' padding) for cubins in YAML
// exports. Decoding skips whitespace, so wrapped text reads back too.
#pragma once

#include <string>
#include <vector>

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

std::string base64_encode(llvm::ArrayRef<char> bytes);
// An error names the offset of the first bad character, or a wrong length.
llvm::Expected<std::vector<char>> base64_decode(llvm::StringRef text);

}  // namespace flashjit
