#include "generator/backward_steps.h"

#include "generator/backward_spec.h"

namespace flashjit {

llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec,
                                                  const Problem &problem) {
  const LaunchGeometry rowwise = backward_rowwise_geometry(problem);
  const char *main_entry =
      spec.config.path == KernelPath::sm90 ? "flashjit_bwd_sm90" : "flashjit_bwd_sm80";
  // The sm90 kernel orders its own dQ reduce-adds in deterministic mode (a
  // semaphore per tile, bwd_sm90.cuh) and ends with the usual conversion.
  if (spec.config.deterministic && spec.config.path != KernelPath::sm90)
    return {{"flashjit_bwd_preprocess", rowwise},
            {main_entry, backward_launch_geometry(spec, problem)},
            {"flashjit_bwd_dq", backward_dq_geometry(spec, problem)}};
  return {{"flashjit_bwd_preprocess", rowwise},
          {main_entry, backward_launch_geometry(spec, problem)},
          {"flashjit_bwd_convert_dq", rowwise}};
}

}  // namespace flashjit
