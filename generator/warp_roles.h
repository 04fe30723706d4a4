// The register budgets the sm90 kernels' warp roles take with setmaxnreg:
// the producer warpgroup gives registers back, the consumer warpgroups take
// them. One source of truth: the generator writes them into the kernel's
// prelude (cfg::kProducerRegisters, cfg::kConsumerRegisters) and
// `flashjit compile` reports them.
#pragma once

#include <optional>

#include "generator/kernel_spec.h"

namespace flashjit {

struct WarpRoleRegisters {
  int producer = 0;  // per thread of the producer warpgroup
  int consumer = 0;  // per thread of each consumer warpgroup
  int consumer_warpgroups = 0;
};

// The sm90 families' budgets; nullopt for kernels without warp roles (sm80).
std::optional<WarpRoleRegisters> warp_role_registers(const KernelSpec &spec);

}  // namespace flashjit
