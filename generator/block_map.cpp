#include "generator/block_map.h"

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"
#include "llvm/Support/FormatVariadic.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/kernel_spec.h"

namespace flashjit {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
constexpr unsigned kThreads = 128;  // fwd_block_map::kThreads, bwd_block_map::kThreads
}  // namespace

LaunchGeometry BlockMapGeometry::kinds_launch() const {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>(heads * batches);
  g.grid.y = static_cast<unsigned>(row_blocks);
  g.grid.z = static_cast<unsigned>(tiles);
  g.block.x = kThreads;
  return g;
}

LaunchGeometry BlockMapGeometry::list_launch() const {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>(ceil_div(rows(), kThreads / 32));
  g.block.x = kThreads;
  return g;
}

LaunchGeometry BlockMapGeometry::runs_launch() const {
  LaunchGeometry g = kinds_launch();
  g.grid.z = static_cast<unsigned>(kRunSlots);
  return g;
}

LaunchGeometry BlockMapGeometry::grid_launch(int64_t rows) {
  LaunchGeometry g;
  g.grid.x = static_cast<unsigned>(ceil_div(rows, kThreads / 32));
  g.block.x = kThreads;
  return g;
}

uint64_t block_mask_grid_bytes(const BlockMask &mask) {
  return uint64_t(mask.batches) * uint64_t(mask.heads) * uint64_t(mask.q_blocks) *
         uint64_t(mask.k_blocks);
}

llvm::Error validate_block_mask(const Problem &problem, const Modifiers *modifiers,
                                const BlockMask *mask) {
  if (!mask) return llvm::Error::success();
  auto error = [](const std::string &message) {
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "argument block_mask: " + message);
  };
  if (!modifiers || modifiers->mask_mod.empty())
    return error("given without a mask_mod; a block mask only says which tiles a mask_mod "
                 "hides or shows whole: pass the mask_mod it was built from");
  if (mask->block_q <= 0 || mask->block_k <= 0)
    return error(llvm::formatv("block sizes {0} x {1}: both must be positive", mask->block_q,
                               mask->block_k));
  if (mask->batches != 1 && mask->batches != problem.batch)
    return error(llvm::formatv("batches={0}: expected 1 (one mask for every sequence) or the "
                               "problem's batch, {1}",
                               mask->batches, problem.batch));
  if (mask->heads != 1 && mask->heads != problem.heads_q)
    return error(llvm::formatv("heads={0}: expected 1 (one mask for every head) or the "
                               "problem's heads_q, {1}",
                               mask->heads, problem.heads_q));
  const int64_t q_blocks = ceil_div(problem.seqlen_q, mask->block_q);
  const int64_t k_blocks = ceil_div(problem.seqlen_k, mask->block_k);
  if (mask->q_blocks != q_blocks || mask->k_blocks != k_blocks)
    return error(llvm::formatv("{0} x {1} blocks of {2} x {3}: seqlen_q={4} and seqlen_k={5} "
                               "take {6} x {7}; build the mask for this call's lengths",
                               mask->q_blocks, mask->k_blocks, mask->block_q, mask->block_k,
                               problem.seqlen_q, problem.seqlen_k, q_blocks, k_blocks));
  if (!mask->kv_num_blocks || !mask->kv_indices)
    return error("kv_num_blocks and kv_indices must both be device pointers (the partial "
                 "blocks; an empty list is a count of 0)");
  if (!mask->full_kv_num_blocks != !mask->full_kv_indices)
    return error("full_kv_num_blocks and full_kv_indices: give both (the full blocks) or "
                 "neither");
  if (block_mask_grid_bytes(*mask) >= (uint64_t(1) << 31))
    return error(llvm::formatv("{0} x {1} x {2} x {3} blocks, 2^31 or more: use larger "
                               "blocks, or one mask for every batch and head",
                               mask->batches, mask->heads, q_blocks, k_blocks));
  return llvm::Error::success();
}

bool has_block_map(const KernelSpec &spec) {
  return spec.config.path == KernelPath::sm90 && !spec.modifiers.mask_mod.empty();
}

BlockMapGeometry forward_block_map_geometry(const KernelSpec &spec, const Problem &problem) {
  BlockMapGeometry g;
  if (!has_block_map(spec)) {
    g.heads = g.batches = 0;
    return g;
  }
  const FwdSm90Traits t{spec.head_dim_qk,  spec.config.block_m, spec.config.block_n,
                        spec.config.warps, spec.config.stages,  spec.pack_gqa,
                        spec.page_size,    spec.head_dim_v};
  g.row_blocks = ceil_div(problem.seqlen_q, t.layout().q_rows_per_tile());
  g.tiles = ceil_div(problem.seqlen_k, spec.config.block_n);
  const bool qk_only = spec.modifiers.mask_mod_qk_only == MaskModQkOnly::on;
  // Sequences of their own lengths have maps of their own even when the
  // mask reads only (q, k): the tiles past a shorter one's end differ.
  const bool per_sequence_lengths = spec.varlen || spec.seqused_k;
  g.heads = qk_only ? 1 : spec.pack_gqa > 1 ? problem.heads_q / spec.pack_gqa : problem.heads_q;
  g.batches = qk_only && !per_sequence_lengths ? 1 : problem.batch;
  // fwd_sm90.cuh's kRowRuns.
  if (t.layout().consumer_warpgroups() < 3 && (spec.pack_gqa <= 1 || qk_only))
    g.run_words = t.layout().q_rows_per_tile();
  return g;
}

BlockMapGeometry backward_block_map_geometry(const KernelSpec &spec, const Problem &problem) {
  BlockMapGeometry g;
  if (!has_block_map(spec)) {
    g.heads = g.batches = 0;
    return g;
  }
  g.row_blocks = ceil_div(problem.seqlen_k, spec.config.block_n);
  g.tiles = ceil_div(problem.seqlen_q, spec.config.block_m);
  const bool qk_only = spec.modifiers.mask_mod_qk_only == MaskModQkOnly::on;
  // As the forward's: a packed batch's sequences have maps of their own.
  g.heads = qk_only ? 1 : problem.heads_kv;
  g.batches = qk_only && !spec.varlen ? 1 : problem.batch;
  return g;
}

}  // namespace flashjit
