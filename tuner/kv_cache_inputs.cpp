#include "tuner/kv_cache_inputs.h"

#include <algorithm>
#include <numeric>
#include <random>

namespace flashjit {

llvm::Expected<KvCacheInputs> make_kv_cache_inputs(const Problem &p, ForwardArgs &args,
                                                   KvCacheFill fill, uint64_t seed) {
  KvCacheInputs out;
  if (!p.seqused_k && p.page_size == 0) return out;
  std::mt19937_64 rng(seed);
  if (p.seqused_k) {
    out.lengths.assign(p.batch, static_cast<int32_t>(p.seqlen_k));
    if (fill == KvCacheFill::random_shuffled)
      for (int32_t &n : out.lengths) n = static_cast<int32_t>(1 + rng() % p.seqlen_k);
    auto buffer = DeviceBuffer::allocate(out.lengths.size() * sizeof(int32_t));
    if (!buffer) return buffer.takeError();
    if (llvm::Error e = buffer->upload(out.lengths.data(), out.lengths.size() * sizeof(int32_t)))
      return e;
    out.cache_seqlens = std::move(*buffer);
    args.cache.cache_seqlens = static_cast<const int32_t *>(out.cache_seqlens.data());
  }
  if (p.page_size > 0) {
    const int64_t width = p.seqlen_k / p.page_size;
    out.table.resize(p.batch * width);
    std::iota(out.table.begin(), out.table.end(), 0);
    if (fill == KvCacheFill::random_shuffled) std::shuffle(out.table.begin(), out.table.end(), rng);
    auto buffer = DeviceBuffer::allocate(out.table.size() * sizeof(int32_t));
    if (!buffer) return buffer.takeError();
    if (llvm::Error e = buffer->upload(out.table.data(), out.table.size() * sizeof(int32_t)))
      return e;
    out.page_table = std::move(*buffer);
    args.cache.page_table = static_cast<const int32_t *>(out.page_table.data());
    args.cache.page_table_stride = width;
    args.cache.num_pages = p.batch * width;
    // Page i of the packed buffers starts page_size rows after page i - 1.
    args.k_strides.batch = p.page_size * args.k_strides.seq;
    args.v_strides.batch = p.page_size * args.v_strides.seq;
  }
  return out;
}

}  // namespace flashjit
