// The probes of a caller's modifiers (include/flashjit/modifiers.h): small
// programs NVRTC compiles to PTX, whose text says what the host cannot
// tell from the snippets without compiling them. Two questions, two
// programs, each keyed by the part of the modifiers it compiles:
//
// - Does the score_mod snippet define its own score_mod_grad? The probe
//   asks the overload resolution a backward kernel's call does
//   (modifiers_prelude), with an overload of last resort, and stores which
//   one it found in a variable the PTX initialises.
// - Does mask_mod read b and h at all? The probe's kernel passes b, h, q, k
//   and the aux struct to the policy's visible() (the function every
//   kernel calls) as kernel parameters, which the compiler cannot know,
//   and stores the result. A parameter is read only through its .param
//   symbol (ld.param, or its address taken), so a body that never names
//   b's symbol computes the same result for every b: the optimiser proved
//   mask_mod independent of it, e.g. by folding `b * 0` away. An aux array
//   indexed by b names b (its address needs it); so does a read that cannot
//   change the result but was not folded, which only costs the shared map.
//   The kernels compile the same text with the same options for the same
//   target, so what holds of the probe holds of them (a snippet with
//   undefined behaviour has no result to preserve).
#pragma once

#include "flashjit/modifiers.h"
#include "generator/source.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// What the score_mod_grad probe compiles of `modifiers`: score_mod and the
// aux fields (never a score_mod_grad given apart: the question is whether
// the snippet has its own); its hash keys the probe's finding.
Modifiers score_mod_grad_probed(const Modifiers &modifiers);
// mask_mod and the aux fields, likewise.
Modifiers mask_mod_probed(const Modifiers &modifiers);

// The variable of the score_mod_grad probe, 1 where the backward's call
// finds the snippet's own; the mask_mod probe's kernel.
inline constexpr const char *kGradProbeVariable = "flashjit_probe_score_mod_grad";
inline constexpr const char *kMaskProbeEntry = "flashjit_probe_mask_mod";

// The probe programs (of a score_mod, of a mask_mod): the prelude every
// modified program has (modifiers_prelude), then the probe. Options: the
// kernels' (kernel_compile_options).
GeneratedSource generate_score_mod_grad_probe(const Modifiers &modifiers);
GeneratedSource generate_mask_mod_probe(const Modifiers &modifiers);

// Whether the score_mod_grad probe's PTX found the snippet's own; an error
// where the PTX lacks the variable.
llvm::Expected<bool> read_score_mod_grad_probe(llvm::StringRef ptx);

struct MaskModReads {
  bool b = false, h = false;
  // Neither: one block map serves every batch and head.
  bool qk_only() const { return !b && !h; }
  bool operator==(const MaskModReads &) const = default;
};
// Which of b and h the mask_mod probe's kernel body names; an error where
// the PTX lacks the kernel.
llvm::Expected<MaskModReads> read_mask_mod_probe(llvm::StringRef ptx);

}  // namespace flashjit
