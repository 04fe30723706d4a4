#include "generator/block_mask_builder.h"

#include "generator/block_map.h"
#include "generator/modifier_source.h"
#include "templates/block_mask_build.cuh"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
}  // namespace

Modifiers block_mask_modifiers(const Modifiers &modifiers) {
  Modifiers mask;
  mask.mask_mod = modifiers.mask_mod;
  mask.mask_mod_qk_only = modifiers.mask_mod_qk_only;
  mask.aux = modifiers.aux;
  return mask;
}

GeneratedSource generate_block_mask_builder(const Modifiers &modifiers) {
  // The kernels' options: mask_mod must decide each element as a call's
  // kernels would, since a block shown whole is never evaluated again.
  return modified_program("block_mask_build.cu", "block_mask_build.cuh",
                          {"flashjit_block_mask_kinds", "flashjit_block_mask_lists"},
                          block_mask_modifiers(modifiers), kernel_compile_options());
}

llvm::Error validate_block_mask_to_build(const Problem &problem, const Modifiers &modifiers,
                                         const BlockMask &out) {
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "create_block_mask: " + message);
  };
  if (problem.varlen)
    return error("a packed batch (varlen) has no block mask of FlexAttention's layout; its "
                 "calls build their own block map");
  if (modifiers.mask_mod.empty())
    return error("the modifiers have no mask_mod to build the mask of");
  if (llvm::Error e = validate_modifiers(modifiers)) return e;
  if (llvm::Error e = validate_block_mask(problem, &modifiers, &out)) return e;
  if (!out.full_kv_num_blocks || !out.full_kv_indices)
    return error("full_kv_num_blocks and full_kv_indices must be device pointers: the blocks "
                 "mask_mod shows whole are written there");
  if (modifiers.mask_mod_qk_only == MaskModQkOnly::off &&
      (out.batches != problem.batch || out.heads != problem.heads_q))
    return error(
        llvm::formatv("batches={0}, heads={1}: a mask_mod that may read b or h "
                      "(mask_mod_qk_only off: given, or found by the probe) needs "
                      "the problem's, {2} and {3}; one mask of every batch and head "
                      "needs a mask_mod of q and k alone",
                      out.batches, out.heads, problem.batch, problem.heads_q));
  if (out.q_blocks > 65535 || out.k_blocks > 65535 || out.batches * out.heads > (1ll << 31) - 1)
    return error(llvm::formatv("{0} x {1} blocks: at most 65535 each way; use larger blocks",
                               out.q_blocks, out.k_blocks));
  return llvm::Error::success();
}

LaunchGeometry block_mask_kinds_launch(const BlockMask &out) {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>(out.batches * out.heads);
  g.grid.y = static_cast<unsigned>(out.q_blocks);
  g.grid.z = static_cast<unsigned>(out.k_blocks);
  g.block.x = kBlockMaskBuildThreads;
  return g;
}

LaunchGeometry block_mask_lists_launch(const BlockMask &out) {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>(
      ceil_div(out.batches * out.heads * out.q_blocks, kBlockMaskBuildThreads / 32));
  g.block.x = kBlockMaskBuildThreads;
  return g;
}

uint64_t block_mask_kinds_bytes(const BlockMask &out) { return block_mask_grid_bytes(out); }

}  // namespace flashjit
