// The inputs a kernel with a caller's modifiers runs on where no caller
// gives them (`flashjit run`, and the tuner's timing and accuracy check):
// each pointer field of the aux struct a device array of generated values,
// each scalar field the value of its NAME=VALUE (--aux-value), and
// generated learned sinks. The same values for a run and a tune: a scalar
// such as a prefix length or a window decides how much work a mask leaves,
// so the caller gives it; the arrays are made to be in bounds for any index
// a snippet derives from (b, h, q, k).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "flashjit/backward.h"
#include "flashjit/forward.h"
#include "flashjit/modifiers.h"
#include "reference/backward_check.h"
#include "runtime/device_buffer.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// The modifiers a tune's candidates compile and the scalar values they run
// with: the worker request's and the runner's view of TuneOptions'.
struct TunedModifiers {
  Modifiers modifiers;
  std::vector<std::string> aux_values;  // "NAME=VALUE", each scalar aux field once
  bool empty() const { return modifiers.empty() && aux_values.empty(); }
};

struct ModifierInputs {
  Modifiers modifiers;
  std::optional<AuxValues> aux;
  std::vector<DeviceBuffer> arrays;  // the pointer fields' generated values
  DeviceBuffer sinks;                // heads_q fp32 logits, with modifiers.sinks
  std::vector<std::string> lines;    // what each input is, for the report

  // Points `args` at the modifiers, their aux values and the sinks.
  void attach(ForwardArgs &args) const;
  // The same for the backward; `dsinks` (heads_q fp32) receives the sinks'
  // gradient when modifiers.sinks.
  void attach(BackwardArgs &args, float *dsinks) const;
  // The same for the GPU reference's check of a backward
  // (check_modified_backward).
  ModifierArgs reference_args() const;
};

// The scalar inputs of `modifiers`, with no GPU: `values` ("NAME=VALUE")
// set the scalar fields, each exactly once; an error names the value as
// `given_as` (the CLI's flag) and the field, and what was expected.
llvm::Expected<ModifierInputs> parse_modifier_inputs(const Modifiers &modifiers,
                                                     llvm::ArrayRef<std::string> values,
                                                     llvm::StringRef given_as = "--aux-value");

// Then on the GPU, for problem `p`: a pointer field gets max(batch,
// heads_q) * (2 * max(seqlen_q, seqlen_k) + 1) elements, enough for an
// index by batch or head times a position or a signed distance: floats
// -((i % 8) + 1) / 16 (ALiBi-like slopes, a bias table), integers i / 97
// (97-token documents, cut across tiles), bytes (i / 97) % 2; the sinks
// ((h % 5) - 2) * 0.7 per query head.
llvm::Error upload_modifier_inputs(const Problem &p, ModifierInputs &inputs);

// Both, for a tune's runner in the current context: none (null) without
// modifiers; `given_as` names the values in errors.
llvm::Expected<std::unique_ptr<ModifierInputs>> make_modifier_inputs(
    const Problem &p, const TunedModifiers &tuned, llvm::StringRef given_as = "aux value");

}  // namespace flashjit
