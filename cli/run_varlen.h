// `flashjit run --varlen`: a packed batch (flash_attn_varlen_func's
// layout) on the GPU with random inputs, forward or (--pass bwd) backward.
// The sequences' lengths come from --seqlens-q/--seqlens-k, else they are
// drawn at random up to --seqlen-q/--seqlen-k (--seed; one sequence has the
// longest lengths). With --check each sequence is compared with the
// reference applied to it alone: the forward's with the GPU reference on
// the whole batch; the backward's with float64 CPU gradients on a few of
// its sequences scaled down (backward_accuracy_packed_batch), as the dense
// backward checks a small problem of its class. TFLOP/s count each
// sequence's own work (the backward's 2.5x the forward's).
#pragma once

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/packed_lengths.h"
#include "cli/problem_flags.h"
#include "runtime/device.h"

namespace flashjit::cli {

int run_varlen(const RunCommand &command, const CommonOptions &common,
               const ResolvedKernel &kernel, const ParsedProblem &parsed,
               const DeviceInfo &device);

}  // namespace flashjit::cli
