// `flashjit run --varlen` over a KV cache (--page-size and/or
// --cache-seqlens): the serving call (flash_attn_varlen_func with
// seqused_k and block_table) on random inputs. Each sequence's queries are
// packed as --varlen's and its --seqlens-k keys sit in a cache of
// seqlen_k keys per sequence: paged, at shuffled pages (zeros past its
// keys), with the counts in seqused_k (--cache-seqlens) or cu_seqlens_k;
// contiguous, packed and counted by seqused_k. --check compares each
// sequence with the GPU reference applied to it alone, on the same keys;
// GB/s count the keys each sequence reads.
#pragma once

#include "cli/cli_common.h"
#include "cli/commands.h"
#include "reference/packed_batch.h"
#include "runtime/device.h"

namespace flashjit::cli {

int run_serving(const RunCommand &command, const CommonOptions &common,
                const ResolvedKernel &kernel, const PackedBatch &lengths,
                const DeviceInfo &device);

}  // namespace flashjit::cli
