// What the probes (generator/modifier_probe.h) find in a caller's
// modifiers, compiled with NVRTC once per process for each probed text
// (and target), then answered from memory: a call never compiles a probe
// twice, and a call whose modifiers need no probe compiles none. Where a
// tuning database is given, a finding is read from it before any probe and
// kept in it after one (TuningDb::put_snippet_fact): a process served from
// a precompiled database compiles no probe either. Then the
// modifiers a pass compiles, decided from them: mask_mod_qk_only left
// `automatic` becomes `on` where mask_mod reads neither b nor h (one block
// map for every batch and head) and `off` otherwise, and the backward's
// derivative of a score_mod is the one given apart or the one the
// snippet defines, never both.
#pragma once

#include <cstdint>

#include "flashjit/modifiers.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_probe.h"
#include "generator/target_arch.h"
#include "llvm/Support/Error.h"

namespace flashjit {

class TuningDb;

// Whether the score_mod snippet defines score_mod_grad with the parameters
// a backward kernel passes (false without a score_mod). Probed for sm_80:
// overload resolution does not depend on the target unless the snippet's
// own text does (__CUDA_ARCH__), and a backward kernel's static_assert
// (modifiers_prelude) stops a disagreement at compile time, so this
// answers without a GPU, before any GPU work.
llvm::Expected<bool> score_mod_defines_grad(const Modifiers &modifiers, TuningDb *db = nullptr);

// Which of b and h mask_mod's code for `arch` reads (neither without a
// mask_mod). Probed for the kernels' own target: the shared map is only as
// sound as the probe is faithful to the code that runs.
llvm::Expected<MaskModReads> mask_mod_reads(const Modifiers &modifiers, const TargetArch &arch,
                                            TuningDb *db = nullptr);

// The backward's derivative of a score_mod: an error where there is none
// (score_mod_grad_missing), or where one is given apart while the snippet
// defines one too (its message starts with "score_mod_grad is given apart
// and"); success without a score_mod. Messages without a prefix: the
// caller names the argument.
llvm::Error check_score_mod_grad(const Modifiers &modifiers, TuningDb *db = nullptr);

// `modifiers` as a call of `pass` on `arch` compiles them: mask_mod_qk_only
// `automatic` decided by mask_mod_reads (unchanged without a mask_mod:
// `automatic` compiles as `off`), and for the backward check_score_mod_grad.
llvm::Expected<Modifiers> resolve_modifiers(const Modifiers &modifiers, Pass pass,
                                            const TargetArch &arch, TuningDb *db = nullptr);

// The probes this process has compiled (each NVRTC compile also counts in
// runtime_stats().compiles).
uint64_t modifier_probe_compiles();

}  // namespace flashjit
