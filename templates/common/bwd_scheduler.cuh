// The backward's tile scheduler, beside the forward's
// (common/fwd_scheduler.cuh): which keys a work item holds.
//
// A work item is a block of kBlockN keys of one KV head and batch entry
// (the backward parallelises over K/V column blocks). Items are numbered in
// sections of p.dispatch_section (KV head, batch) pairs (the last may hold
// fewer), key blocks outer within a section, so that a section's heaviest
// items under a mask (the first key blocks) start first and the CTAs
// running at once share Q and dO heads in L2; in the deterministic mode
// where p.shortest_first, its lightest first (BwdSm90Traits::dispatch_order
// says why). How items reach CTAs (one each, or taken from a counter by a
// producer) is the kernel's: bwd_sm90_work.cuh.
#pragma once

#include "common/bwd_params.cuh"

namespace flashjit {

struct WorkKeys {
  int n0, kv_head, batch;  // first key, KV head, batch entry
};

template <int kBlockN, bool kDeterministic>
struct BwdTileScheduler {
  // Each role computes an item's keys after its setmaxnreg: values live
  // across the register reallocation are spilled (at d = 256, 0 -> 68
  // bytes when computed once up front).
  __device__ __forceinline__ static WorkKeys keys_of(const BwdParams &p, int item) {
    const int heads_kv = p.heads_q / p.heads_per_kv;
    const int pairs = heads_kv * p.batch;
    const int n_blocks = p.work_items / pairs;
    const int section_ctas = p.dispatch_section * n_blocks;
    const int section = item / section_ctas;
    const int in_section = item - section * section_ctas;
    const int first_pair = section * p.dispatch_section;
    const int section_pairs = min(p.dispatch_section, pairs - first_pair);
    const int pair = first_pair + in_section % section_pairs;
    int key_block = in_section / section_pairs;
    if constexpr (kDeterministic)
      if (p.shortest_first) key_block = n_blocks - 1 - key_block;
    return {key_block * kBlockN, pair % heads_kv, pair / heads_kv};
  }
};

}  // namespace flashjit
