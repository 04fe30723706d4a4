// A caller's modifiers (include/flashjit/modifiers.h) in a generated
// program: their validation, the part of a kernel's id that names them, and
// the prelude that compiles them in (templates/common/modifiers.cuh says how
// the kernels call them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/modifiers.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// The bytes FwdParams::aux holds: the extra inputs' struct must fit.
constexpr int kAuxBytes = 64;

// Checks the aux fields (known types, C identifiers, no name twice, at most
// kAuxBytes laid out as a C struct) and that a declared input has a
// modifier to read it.
llvm::Error validate_modifiers(const Modifiers &modifiers);
// Its checks of which functions and flags go together, without the aux
// layout (a call lays that out once itself).
llvm::Error validate_modifier_functions(const Modifiers &modifiers);

// The offset of the first byte of `text` that is not valid UTF-8, or none.
// Snippets travel to compile workers as JSON strings, which hold UTF-8 only.
std::optional<size_t> first_non_utf8_byte(llvm::StringRef text);

// 16 hex digits of a hash of the snippets and the fields, the same in every
// process ("" for none): part of the kernel's id, so of its cubin's key.
std::string modifiers_hash(const Modifiers &modifiers);
// The same as a number (0 for none), for call keys.
uint64_t modifiers_hash_value(const Modifiers &modifiers);

// The offset of each aux field in struct Aux (C layout), and its size.
struct AuxSlot {
  int offset, size;
};
llvm::Expected<std::vector<AuxSlot>> aux_layout(const Modifiers &modifiers);
// sizeof(struct Aux) of those slots: the last one's end, rounded up to the
// widest field (0 without fields).
int aux_struct_bytes(const std::vector<AuxSlot> &slots);

// "const float* slopes, int prefix" as fields (types with their spaces
// normalised: "const float *" is "const float*"); an error names the
// declaration that is not "TYPE NAME". The CLI's --aux and the C API's
// declarations.
llvm::Expected<std::vector<AuxField>> parse_aux_declarations(llvm::StringRef text);

// The program text that defines struct Aux, the caller's functions (each
// after a `#line 1 "score_mod"` / `"mask_mod"`, so NVRTC reports errors in
// the snippet's own lines) and flashjit::cfg::Modifiers; `first_line` is
// the generated file's line where it starts (`program` the file's name), so
// a `#line` after the snippets puts the numbering back. Empty modifiers
// give `using Modifiers = NoModifiers;` in flashjit::cfg. `backward`: the
// program calls score_grad, which is then the score_mod_grad given apart,
// else the one the score_mod snippet defines, found by overload
// resolution (a static_assert names its absence); a forward program's
// score_grad is 1 and its text the same as before there was a choice.
std::string modifiers_prelude(const Modifiers &modifiers, int first_line,
                              const std::string &program, bool backward = false);

// "float score_mod_grad(float score, int b, int h, int q, int k[, const Aux
// &aux])": the derivative's declaration a snippet must match, as the
// kernels call it.
std::string score_mod_grad_signature(const Modifiers &modifiers);
// Why a backward of `modifiers` cannot run: its score_mod has no
// derivative, neither given apart nor in its own source.
std::string score_mod_grad_missing(const Modifiers &modifiers);

}  // namespace flashjit
