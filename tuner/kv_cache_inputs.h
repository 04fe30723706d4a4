// The KV-cache device data (cache_seqlens, a page table) for running a
// KV-cache problem over K/V buffers laid out as the dense problem's packed
// [batch, seqlen_k, heads_kv, d] tensors. Paged, those same bytes are
// batch * seqlen_k / page_size pages of page_size rows; sequence b's pages
// are b * width .. (b + 1) * width - 1 in order, or a shuffle of all pages.
// With every sequence at its full seqlen_k and the pages in order the call
// computes exactly the dense problem, which is how the tuner times and
// checks a KV-cache class against the dense reference; the CLI's `run`
// draws lengths and shuffles pages to look like a serving cache.
#pragma once

#include <cstdint>
#include <vector>

#include "flashjit/forward.h"
#include "runtime/device_buffer.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct KvCacheInputs {
  DeviceBuffer cache_seqlens;  // [batch] int32 (Problem::seqused_k)
  DeviceBuffer page_table;     // [batch, seqlen_k / page_size] int32 (paged)
  std::vector<int32_t> lengths;  // the host copies
  std::vector<int32_t> table;
};

enum class KvCacheFill {
  full_in_order,     // every sequence seqlen_k keys, pages in order: the dense problem
  random_shuffled,   // lengths drawn from [1, seqlen_k], pages shuffled (`seed`)
};

// Uploads the cache's device data for `problem` (nothing for a problem
// without a KV cache) and points `args` at it; paged, the K/V strides become
// the page strides of the packed buffers. `args` keeps pointing into the
// returned buffers: keep them alive while it is used.
llvm::Expected<KvCacheInputs> make_kv_cache_inputs(const Problem &problem, ForwardArgs &args,
                                                   KvCacheFill fill, uint64_t seed = 1);

}  // namespace flashjit
