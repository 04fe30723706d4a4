#include "runtime/block_mask_build.h"

#include <cstring>

#include "generator/block_mask_builder.h"
#include "generator/modifier_source.h"
#include "runtime/device.h"
#include "runtime/launch_forward.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/program_kernel.h"
#include "runtime/workspace_pool.h"
#include "templates/block_mask_build.cuh"

namespace flashjit {

namespace {

// The builder's kernel `entry` (one program per mask_mod: its hash is in
// the id).
llvm::Expected<const LoadedKernel &> builder_kernel(const Modifiers &modifiers,
                                                    const char *entry) {
  return program_kernel(
      "block_mask_build", block_mask_modifiers(modifiers),
      [&] { return generate_block_mask_builder(modifiers); }, entry, 0, nullptr);
}

}  // namespace

llvm::Error enqueue_block_mask_build(const Problem &problem, const Modifiers &modifiers,
                                     const void *aux, size_t aux_bytes, const BlockMask &out,
                                     CUstream stream) {
  if (llvm::Error e = validate_problem(problem)) return e;
  if (llvm::Error e = validate_block_mask_to_build(problem, modifiers, out)) return e;
  if (llvm::Error e = validate_modifier_args(&modifiers, aux, aux_bytes)) return e;
  // Whether one mask serves every batch and head, as a call decides it:
  // left to the probe, for the device's target, and checked again.
  Modifiers resolved = modifiers;
  if (!modifiers.mask_mod.empty() && modifiers.mask_mod_qk_only == MaskModQkOnly::automatic) {
    auto context = current_or_primary_context();
    if (!context) return context.takeError();
    auto device = cached_device_info(static_cast<int>(context->device));
    if (!device) return device.takeError();
    auto found = resolve_modifiers(modifiers, Pass::forward, device->target(),
                                   process_tuning_db());
    if (!found) return found.takeError();
    resolved = std::move(*found);
    if (llvm::Error e = validate_block_mask_to_build(problem, resolved, out)) return e;
  }
  auto kinds = builder_kernel(resolved, "flashjit_block_mask_kinds");
  if (!kinds) return kinds.takeError();
  auto lists = builder_kernel(resolved, "flashjit_block_mask_lists");
  if (!lists) return lists.takeError();

  BlockMaskBuildParams params{};
  // The arrays are the caller's to fill: BlockMask describes them for the
  // calls that read them, hence const there.
  params.kv_num_blocks = const_cast<int *>(out.kv_num_blocks);
  params.kv_indices = const_cast<int *>(out.kv_indices);
  params.full_kv_num_blocks = const_cast<int *>(out.full_kv_num_blocks);
  params.full_kv_indices = const_cast<int *>(out.full_kv_indices);
  params.batches = static_cast<int>(out.batches);
  params.heads = static_cast<int>(out.heads);
  params.q_blocks = static_cast<int>(out.q_blocks);
  params.k_blocks = static_cast<int>(out.k_blocks);
  params.block_q = out.block_q;
  params.block_k = out.block_k;
  params.seqlen_q = static_cast<int>(problem.seqlen_q);
  params.seqlen_k = static_cast<int>(problem.seqlen_k);
  static_assert(sizeof(params.aux) >= 64, "the aux struct's room");
  if (aux_bytes > 0) std::memcpy(params.aux, aux, aux_bytes);
  if (out.batches * out.heads * out.q_blocks == 0) return llvm::Error::success();

  const uint64_t bytes = block_mask_kinds_bytes(out);
  auto scratch = allocate_workspace(kinds->device(), bytes > 0 ? bytes : 1, stream);
  if (!scratch) return scratch.takeError();
  params.kinds = reinterpret_cast<unsigned char *>(*scratch);
  void *args[] = {&params};
  llvm::Error error = llvm::Error::success();
  if (out.k_blocks > 0) error = kinds->launch(block_mask_kinds_launch(out), stream, args);
  if (!error) error = lists->launch(block_mask_lists_launch(out), stream, args);
  return llvm::joinErrors(std::move(error), free_workspace(*scratch, stream));
}

}  // namespace flashjit
