// Problem + caller's tensors -> the kernel's parameter block (FwdParams, the
// struct the device code reads).
#pragma once

#include "flashjit/forward.h"
#include "templates/common/fwd_params.cuh"

namespace flashjit {

// A tensor's strides into a parameter block's three fields (both passes'
// blocks name them batch, row, head).
inline void set_strides(const TensorStrides &s, long long &batch, long long &row,
                        long long &head) {
  batch = s.batch;
  row = s.seq;
  head = s.head;
}

// Expects a validated problem. Unbounded window sides become a bound no
// sequence reaches, so the kernel needs no special case for them.
FwdParams make_forward_params(const Problem &problem, const ForwardArgs &args);

// The append kernel's block (templates/kv_append.cuh) for a call with
// args.cache.k_new: the new keys and values into the cache.
KvAppendParams make_kv_append_params(const Problem &problem, const ForwardArgs &args);

}  // namespace flashjit
