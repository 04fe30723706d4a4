// A small valid problem for C API tests, the dtype and mask chosen per test.
#pragma once

#include <cstring>

#include "flashjit/flashjit.h"

namespace flashjit::testing_c_api {

inline flashjit_problem c_problem(int dtype, int mask) {
  flashjit_problem p;
  std::memset(&p, 0, sizeof(p));
  p.dtype = dtype;
  p.mask = mask;
  p.batch = 1;
  p.heads_q = 4;
  p.heads_kv = 4;
  p.seqlen_q = 17;
  p.seqlen_k = 17;
  p.head_dim_qk = 64;
  p.head_dim_v = 64;
  p.window_left = -1;
  p.window_right = -1;
  return p;
}

}  // namespace flashjit::testing_c_api
