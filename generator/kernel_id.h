// KernelSpec::id() read back: the spec a stored cubin's id names, so that
// the cubin can be regenerated and recompiled to check it (`flashjit db
// verify`, `db import`). The id holds every parameter that changes the
// program except a caller's modifiers, of which it holds only the hash: a
// modified kernel's source cannot be rebuilt from its id.
#pragma once

#include <string>

#include "generator/kernel_spec.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct ParsedKernelId {
  KernelSpec spec;  // without modifiers
  // The hash after "_mod" (16 hex digits) where the kernel compiled a
  // caller's modifiers; "" for none.
  std::string modifiers_hash;
};

// The spec whose id() is `id` (with its modifiers' hash appended where it
// has one). An id that is not exactly such a string (another order, a
// leading zero, an unknown field) is an error naming the id and the field.
llvm::Expected<ParsedKernelId> parse_kernel_id(llvm::StringRef id);

}  // namespace flashjit
