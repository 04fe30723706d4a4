// `flashjit run` of an fp8 problem (--dtype e4m3, or --kv-dtype e4m3 under a
// 16-bit --dtype): standard-normal inputs quantized on the host per (batch,
// KV head) to e4m3 with descale = amax / 448, uploaded with their descales;
// --check compares the output with the GPU reference computed from the
// de-quantized inputs under the fp8 criterion (reference/accuracy.h:
// FlashAttention-3's RMSE and a max-abs bound) and prints the RMSE. A dense
// batch: the KV cache's and packed batches' fp8 inputs are not drawn here.
#pragma once

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "runtime/device.h"

namespace flashjit::cli {

int run_fp8(const RunCommand &command, const CommonOptions &common, const ResolvedKernel &kernel,
            const DeviceInfo &device);

}  // namespace flashjit::cli
