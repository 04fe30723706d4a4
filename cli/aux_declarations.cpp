#include "cli/aux_declarations.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit::cli {

llvm::Expected<std::vector<AuxField>> parse_aux_declarations(llvm::StringRef text) {
  std::vector<AuxField> fields;
  if (text.trim().empty()) return fields;
  llvm::SmallVector<llvm::StringRef, 8> decls;
  text.split(decls, ',');
  for (llvm::StringRef decl : decls) {
    // The name is the last word; the type, everything before it, with "T *"
    // spelled "T*".
    decl = decl.trim();
    const size_t cut = decl.find_last_of(" \t*");
    if (cut == llvm::StringRef::npos || cut + 1 >= decl.size())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--aux: '{0}' is not a declaration TYPE NAME (e.g. 'const float* "
                        "slopes')",
                        decl)
              .str());
    std::string type;
    for (char c : decl.take_front(cut + 1).trim()) {
      if (c == '*') {
        while (!type.empty() && type.back() == ' ') type.pop_back();
      } else if (c == ' ' || c == '\t') {
        if (!type.empty() && type.back() == ' ') continue;
        c = ' ';
      }
      type += c;
    }
    fields.push_back({type, decl.drop_front(cut + 1).str()});
  }
  return fields;
}

}  // namespace flashjit::cli
