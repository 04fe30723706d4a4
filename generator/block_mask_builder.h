// The program that builds a block mask of a caller's mask_mod once, for every
// call that uses it (templates/block_mask_build.cuh): its source with the
// snippets compiled in, the checks of the mask it is asked to fill, and its
// two launches.
#pragma once

#include <cstdint>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "generator/launch_geometry.h"
#include "generator/source.h"
#include "llvm/Support/Error.h"

namespace flashjit {

// What the builder compiles of `modifiers`: mask_mod, its aux fields and
// mask_mod_qk_only (a score_mod changes no block's kind): its key.
Modifiers block_mask_modifiers(const Modifiers &modifiers);

// One program per block_mask_modifiers(), for every shape and block size.
GeneratedSource generate_block_mask_builder(const Modifiers &modifiers);

// Why `out` cannot be built for `problem` with `modifiers` (an error naming
// the field and what it should be): everything validate_block_mask asks of
// a mask a call reads, all four arrays given, and batches and heads those
// of the problem where mask_mod may read b or h (mask_mod_qk_only `off`:
// given, or resolved so: runtime/modifier_facts.h; `automatic` is checked
// once resolved), since a mask of one head would stand for heads it was
// not computed for. Dense problems only.
llvm::Error validate_block_mask_to_build(const Problem &problem, const Modifiers &modifiers,
                                         const BlockMask &out);

// (batches x heads, q_blocks, k_blocks) CTAs of 128: a CTA a block.
LaunchGeometry block_mask_kinds_launch(const BlockMask &out);
// A warp a row of (batch, head, query block), 4 a CTA.
LaunchGeometry block_mask_lists_launch(const BlockMask &out);
// The classification's scratch: a byte a block.
uint64_t block_mask_kinds_bytes(const BlockMask &out);

}  // namespace flashjit
