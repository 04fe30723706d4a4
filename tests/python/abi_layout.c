/* Prints the C layout of the structs in flashjit.h, one "struct.field offset"
 * line each plus "struct sizeof N", for tests/python/test_capi.py to compare
 * with the ctypes mirror in python/flashjit/_capi.py. */
#include <stddef.h>
#include <stdio.h>

#include "flashjit/flashjit.h"

#define FIELD(T, f) printf(#T "." #f " %zu\n", offsetof(T, f));

int main(void) {
  printf("flashjit_problem sizeof %zu\n", sizeof(flashjit_problem));
  FIELD(flashjit_problem, dtype)
  FIELD(flashjit_problem, mask)
  FIELD(flashjit_problem, batch)
  FIELD(flashjit_problem, heads_q)
  FIELD(flashjit_problem, heads_kv)
  FIELD(flashjit_problem, seqlen_q)
  FIELD(flashjit_problem, seqlen_k)
  FIELD(flashjit_problem, head_dim_qk)
  FIELD(flashjit_problem, head_dim_v)
  FIELD(flashjit_problem, window_left)
  FIELD(flashjit_problem, window_right)
  FIELD(flashjit_problem, softmax_scale)
  FIELD(flashjit_problem, softcap)
  FIELD(flashjit_problem, page_size)
  FIELD(flashjit_problem, seqused_k)
  FIELD(flashjit_problem, varlen)
  FIELD(flashjit_problem, reserved)

  printf("flashjit_forward_args sizeof %zu\n", sizeof(flashjit_forward_args));
  FIELD(flashjit_forward_args, q)
  FIELD(flashjit_forward_args, k)
  FIELD(flashjit_forward_args, v)
  FIELD(flashjit_forward_args, o)
  FIELD(flashjit_forward_args, lse)
  FIELD(flashjit_forward_args, q_stride_batch)
  FIELD(flashjit_forward_args, q_stride_seq)
  FIELD(flashjit_forward_args, q_stride_head)
  FIELD(flashjit_forward_args, k_stride_batch)
  FIELD(flashjit_forward_args, k_stride_seq)
  FIELD(flashjit_forward_args, k_stride_head)
  FIELD(flashjit_forward_args, v_stride_batch)
  FIELD(flashjit_forward_args, v_stride_seq)
  FIELD(flashjit_forward_args, v_stride_head)
  FIELD(flashjit_forward_args, o_stride_batch)
  FIELD(flashjit_forward_args, o_stride_seq)
  FIELD(flashjit_forward_args, o_stride_head)

  printf("flashjit_aux_value sizeof %zu\n", sizeof(flashjit_aux_value));
  FIELD(flashjit_aux_value, name)
  FIELD(flashjit_aux_value, kind)
  FIELD(flashjit_aux_value, reserved)
  FIELD(flashjit_aux_value, pointer)
  FIELD(flashjit_aux_value, integer)
  FIELD(flashjit_aux_value, real)

  printf("flashjit_modifiers sizeof %zu\n", sizeof(flashjit_modifiers));
  FIELD(flashjit_modifiers, score_mod)
  FIELD(flashjit_modifiers, mask_mod)
  FIELD(flashjit_modifiers, aux)
  FIELD(flashjit_modifiers, aux_values)
  FIELD(flashjit_modifiers, aux_count)
  FIELD(flashjit_modifiers, mask_mod_qk_only)
  FIELD(flashjit_modifiers, reserved)
  FIELD(flashjit_modifiers, score_mod_grad)
  FIELD(flashjit_modifiers, sinks)
  FIELD(flashjit_modifiers, dsinks)

  printf("flashjit_kvcache_args sizeof %zu\n", sizeof(flashjit_kvcache_args));
  FIELD(flashjit_kvcache_args, cache_seqlens)
  FIELD(flashjit_kvcache_args, page_table)
  FIELD(flashjit_kvcache_args, page_table_stride)
  FIELD(flashjit_kvcache_args, num_pages)
  FIELD(flashjit_kvcache_args, k_new)
  FIELD(flashjit_kvcache_args, v_new)
  FIELD(flashjit_kvcache_args, seqlen_new)
  FIELD(flashjit_kvcache_args, k_new_stride_batch)
  FIELD(flashjit_kvcache_args, k_new_stride_seq)
  FIELD(flashjit_kvcache_args, k_new_stride_head)
  FIELD(flashjit_kvcache_args, v_new_stride_batch)
  FIELD(flashjit_kvcache_args, v_new_stride_seq)
  FIELD(flashjit_kvcache_args, v_new_stride_head)

  printf("flashjit_backward_args sizeof %zu\n", sizeof(flashjit_backward_args));
  FIELD(flashjit_backward_args, q)
  FIELD(flashjit_backward_args, k)
  FIELD(flashjit_backward_args, v)
  FIELD(flashjit_backward_args, o)
  FIELD(flashjit_backward_args, dout)
  FIELD(flashjit_backward_args, lse)
  FIELD(flashjit_backward_args, dq)
  FIELD(flashjit_backward_args, dk)
  FIELD(flashjit_backward_args, dv)
  FIELD(flashjit_backward_args, q_stride_batch)
  FIELD(flashjit_backward_args, q_stride_seq)
  FIELD(flashjit_backward_args, q_stride_head)
  FIELD(flashjit_backward_args, k_stride_batch)
  FIELD(flashjit_backward_args, k_stride_seq)
  FIELD(flashjit_backward_args, k_stride_head)
  FIELD(flashjit_backward_args, v_stride_batch)
  FIELD(flashjit_backward_args, v_stride_seq)
  FIELD(flashjit_backward_args, v_stride_head)
  FIELD(flashjit_backward_args, o_stride_batch)
  FIELD(flashjit_backward_args, o_stride_seq)
  FIELD(flashjit_backward_args, o_stride_head)
  FIELD(flashjit_backward_args, do_stride_batch)
  FIELD(flashjit_backward_args, do_stride_seq)
  FIELD(flashjit_backward_args, do_stride_head)
  FIELD(flashjit_backward_args, dq_stride_batch)
  FIELD(flashjit_backward_args, dq_stride_seq)
  FIELD(flashjit_backward_args, dq_stride_head)
  FIELD(flashjit_backward_args, dk_stride_batch)
  FIELD(flashjit_backward_args, dk_stride_seq)
  FIELD(flashjit_backward_args, dk_stride_head)
  FIELD(flashjit_backward_args, dv_stride_batch)
  FIELD(flashjit_backward_args, dv_stride_seq)
  FIELD(flashjit_backward_args, dv_stride_head)
  FIELD(flashjit_backward_args, workspace)
  FIELD(flashjit_backward_args, workspace_bytes)

  printf("flashjit_config sizeof %zu\n", sizeof(flashjit_config));
  FIELD(flashjit_config, path)
  FIELD(flashjit_config, block_m)
  FIELD(flashjit_config, block_n)
  FIELD(flashjit_config, warps)
  FIELD(flashjit_config, stages)
  FIELD(flashjit_config, deterministic)
  FIELD(flashjit_config, splits)
  FIELD(flashjit_config, pack_gqa)
  return 0;
}
