#include "generator/block_map.h"

#include "flashjit/problem.h"
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
  const bool qk_only = spec.modifiers.mask_mod_qk_only;
  // Sequences of their own lengths have maps of their own even when the
  // mask reads only (q, k): the tiles past a shorter one's end differ.
  const bool per_sequence_lengths = spec.varlen || spec.seqused_k;
  g.heads = qk_only ? 1 : spec.pack_gqa > 1 ? problem.heads_q / spec.pack_gqa : problem.heads_q;
  g.batches = qk_only && !per_sequence_lengths ? 1 : problem.batch;
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
  const bool qk_only = spec.modifiers.mask_mod_qk_only;
  // As the forward's: a packed batch's sequences have maps of their own.
  g.heads = qk_only ? 1 : problem.heads_kv;
  g.batches = qk_only && !spec.varlen ? 1 : problem.batch;
  return g;
}

}  // namespace flashjit
