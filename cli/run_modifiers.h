// The inputs `flashjit run` gives a kernel with a caller's modifiers
// (--score-mod, --mask-mod, --aux, --sinks): each pointer field of the aux
// struct a device array of generated values, each scalar field the value
// of its --aux-value NAME=VALUE, and generated learned sinks.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "flashjit/forward.h"
#include "flashjit/modifiers.h"
#include "runtime/device_buffer.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

namespace flashjit::cli {

struct ModifierInputs {
  Modifiers modifiers;
  std::optional<AuxValues> aux;
  std::vector<DeviceBuffer> arrays;  // the pointer fields' generated values
  DeviceBuffer sinks;                // heads_q fp32 logits, with modifiers.sinks
  std::vector<std::string> lines;    // what each input is, for the report

  // Points `args` at the modifiers, their aux values and the sinks.
  void attach(ForwardArgs &args) const;
};

// The scalar inputs of `modifiers`, with no GPU: `values` ("NAME=VALUE",
// --aux-value) set the scalar fields, each exactly once; an error (a usage
// error) names the field and what was expected.
llvm::Expected<ModifierInputs> parse_modifier_inputs(const Modifiers &modifiers,
                                                     llvm::ArrayRef<std::string> values);

// Then on the GPU, for problem `p`: a pointer field gets max(batch,
// heads_q) * (2 * max(seqlen_q, seqlen_k) + 1) elements, enough for an
// index by batch or head times a position or a signed distance: floats
// -((i % 8) + 1) / 16 (ALiBi-like slopes, a bias table), integers i / 97
// (97-token documents, cut across tiles), bytes (i / 97) % 2; the sinks
// ((h % 5) - 2) * 0.7 per query head.
llvm::Error upload_modifier_inputs(const Problem &p, ModifierInputs &inputs);

}  // namespace flashjit::cli
