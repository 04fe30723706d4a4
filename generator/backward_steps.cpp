#include "generator/backward_steps.h"

#include "generator/backward_spec.h"

namespace flashjit {

llvm::SmallVector<BackwardStep, 3> backward_steps(const KernelSpec &spec,
                                                  const Problem &problem) {
  const LaunchGeometry rowwise = backward_rowwise_geometry(problem);
  const char *main_entry =
      spec.config.path == KernelPath::sm90 ? "flashjit_bwd_sm90" : "flashjit_bwd_sm80";
  if (spec.config.deterministic)
    return {{"flashjit_bwd_preprocess", rowwise},
            {main_entry, backward_launch_geometry(spec, problem)},
            {"flashjit_bwd_dq", backward_dq_geometry(spec, problem)}};
  return {{"flashjit_bwd_preprocess", rowwise},
          {main_entry, backward_launch_geometry(spec, problem)},
          {"flashjit_bwd_convert_dq", rowwise}};
}

}  // namespace flashjit
