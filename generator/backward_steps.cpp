#include "generator/backward_steps.h"

#include "generator/backward_spec.h"

namespace flashjit {

namespace {

// The steps of `spec`, each with its grid for `problem`, or with a grid of
// one CTA where there is none.
llvm::SmallVector<BackwardStep, 3> steps_of(const KernelSpec &spec, const Problem *problem,
                                            int sm_count) {
  const LaunchGeometry rowwise =
      problem ? backward_rowwise_geometry(*problem) : backward_rowwise_block_geometry();
  const LaunchGeometry main =
      problem ? backward_launch_geometry(spec, *problem, sm_count) : backward_block_geometry(spec);
  const char *main_entry =
      spec.config.path == KernelPath::sm90 ? "flashjit_bwd_sm90" : "flashjit_bwd_sm80";
  llvm::SmallVector<BackwardStep, 3> steps;
  // The sm90 kernel orders its own dQ reduce-adds in deterministic mode (a
  // semaphore per tile, bwd_sm90.cuh) and ends with the usual conversion.
  if (spec.config.deterministic && spec.config.path != KernelPath::sm90)
    steps = {{"flashjit_bwd_preprocess", rowwise},
             {main_entry, main},
             {"flashjit_bwd_dq",
              problem ? backward_dq_geometry(spec, *problem) : backward_dq_block_geometry(spec)}};
  else
    steps = {{"flashjit_bwd_preprocess", rowwise},
             {main_entry, main},
             {"flashjit_bwd_convert_dq", rowwise}};
  if (spec.modifiers.sinks) {
    // Learned sinks' gradient from the LSE and D (bwd_rowwise.cuh): one CTA
    // of 128 threads per query head.
    LaunchGeometry sink_grad;
    if (problem) sink_grad.grid.x = static_cast<unsigned>(problem->heads_q);
    sink_grad.block.x = 128;
    sink_grad.dynamic_smem_bytes = 0;
    steps.push_back({"flashjit_bwd_sink_grad", sink_grad});
  }
  return steps;
}

}  // namespace

llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec, const Problem &problem,
                                                  int sm_count) {
  return steps_of(spec, &problem, sm_count);
}

llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec) {
  return steps_of(spec, nullptr, 0);
}

}  // namespace flashjit
