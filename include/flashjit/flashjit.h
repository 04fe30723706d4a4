/* The C API of flashjit, for FFI (the Python binding uses it through ctypes).
 * Every function returns 0 on success; on failure it returns a nonzero code
 * and flashjit_last_error() holds the message (thread-local). */
#ifndef FLASHJIT_FLASHJIT_H
#define FLASHJIT_FLASHJIT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Q's elements (and K's, V's and O's unless kv_dtype/out_dtype say
 * otherwise). FLASHJIT_E4M3 is fp8 (torch.float8_e4m3fn) for Q, K and V, with
 * descale factors in flashjit_forward_args; forward only (the backward
 * refuses it). */
enum flashjit_dtype { FLASHJIT_BF16 = 0, FLASHJIT_FP16 = 1, FLASHJIT_E4M3 = 2 };
/* K's and V's elements where they differ from Q's: FLASHJIT_KV_E4M3 under a
 * 16-bit dtype is an fp8 KV cache (k_descale/v_descale are its k_scale and
 * v_scale; new keys and values to append stay in Q's dtype and are quantized
 * with them). Under FLASHJIT_E4M3 it changes nothing. */
enum flashjit_kv_dtype { FLASHJIT_KV_SAME = 0, FLASHJIT_KV_E4M3 = 1 };
/* O's elements: AUTO is Q's dtype for 16-bit Q, bf16 for e4m3 Q; BF16 or
 * FP16 choose one for e4m3 Q (a 16-bit problem's output is its dtype). */
enum flashjit_out_dtype { FLASHJIT_OUT_AUTO = 0, FLASHJIT_OUT_BF16 = 1, FLASHJIT_OUT_FP16 = 2 };
enum flashjit_mask { FLASHJIT_MASK_NONE = 0, FLASHJIT_MASK_CAUSAL = 1, FLASHJIT_MASK_WINDOW = 2 };
enum flashjit_path { FLASHJIT_PATH_AUTO = 0, FLASHJIT_PATH_SM80 = 1, FLASHJIT_PATH_SM90 = 2 };
enum flashjit_pack_gqa {
  FLASHJIT_PACK_GQA_AUTO = 0,
  FLASHJIT_PACK_GQA_ON = 1,
  FLASHJIT_PACK_GQA_OFF = 2
};

typedef struct flashjit_problem {
  int32_t dtype; /* enum flashjit_dtype */
  int32_t mask;  /* enum flashjit_mask */
  int64_t batch, heads_q, heads_kv, seqlen_q, seqlen_k;
  int32_t head_dim_qk, head_dim_v;
  int64_t window_left, window_right; /* -1: unbounded */
  float softmax_scale;               /* 0: 1/sqrt(head_dim_qk) */
  float softcap;                     /* 0: off */
  /* KV cache (flashjit_forward_kvcache): 1 when each sequence's key count
   * comes from cache_seqlens; page_size > 0 when K/V are pages. */
  int32_t page_size; /* 0: contiguous; else 1 to 512 rows per page */
  int32_t seqused_k;
  /* 1: a packed batch (flashjit_forward_varlen): q/o [total_q, heads_q, d],
   * k/v [total_k, heads_kv, d]; seqlen_q/seqlen_k are the longest
   * sequence's lengths. */
  int32_t varlen;
  int32_t kv_dtype;  /* enum flashjit_kv_dtype */
  int32_t out_dtype; /* enum flashjit_out_dtype */
  /* Chunked attention (Llama 4; FlashAttention-3's attention_chunk): > 0
   * keeps each query to the keys of its own chunk of this many positions,
   * on top of the mask; 0: off. */
  int32_t attention_chunk;
} flashjit_problem;

/* Element strides; the last dimension is contiguous. */
typedef struct flashjit_forward_args {
  const void *q, *k, *v;
  void *o;
  float *lse; /* [batch, heads_q, seqlen_q] or NULL */
  int64_t q_stride_batch, q_stride_seq, q_stride_head;
  int64_t k_stride_batch, k_stride_seq, k_stride_head;
  int64_t v_stride_batch, v_stride_seq, v_stride_head;
  int64_t o_stride_batch, o_stride_seq, o_stride_head;
  /* e4m3 tensors' dequantization factors (real = stored * factor), fp32 on
   * the device, [batch, heads_kv] with these element strides (both 0: one
   * factor per tensor): q_descale with e4m3 Q, k_descale and v_descale with
   * e4m3 K/V (an fp8 KV cache's k_scale and v_scale); NULL where the
   * tensor is 16-bit. */
  const float *q_descale, *k_descale, *v_descale;
  int64_t descale_stride_batch, descale_stride_head;
} flashjit_forward_args;

/* A KV cache (flash_attn_with_kvcache), for a problem with seqused_k or
 * page_size: cache_seqlens [batch] int32 (each sequence's cached keys; its
 * key count is min(cache_seqlens[b] + seqlen_new, seqlen_k)); with page_size,
 * k/v of flashjit_forward_args are [num_pages, page_size, heads_kv, d] (their
 * batch strides step between pages) and page_table [batch, seqlen_k /
 * page_size] int32 rows page_table_stride apart list each sequence's pages.
 * k_new/v_new [batch, seqlen_new, heads_kv, d] (optional, both or neither)
 * are written into the cache at cache_seqlens[b] before attention, in Q's
 * dtype (quantized with k_descale/v_descale into an fp8 cache). Device
 * values are clamped: no table or count content makes a kernel access memory
 * outside the cache (a page index outside [0, num_pages) reads zeros). */
typedef struct flashjit_kvcache_args {
  const int32_t *cache_seqlens;
  const int32_t *page_table;
  int64_t page_table_stride, num_pages;
  const void *k_new, *v_new;
  int64_t seqlen_new;
  int64_t k_new_stride_batch, k_new_stride_seq, k_new_stride_head;
  int64_t v_new_stride_batch, v_new_stride_seq, v_new_stride_head;
  /* A contiguous cache only, both optional (NULL): cache_batch_idx [batch]
   * int32, the K/V batch entry of each sequence (k/v then have
   * num_cache_batches entries); cache_leftpad [batch] int32, the row each
   * sequence's keys start at (flash_attn_with_kvcache's arguments). */
  const int32_t *cache_batch_idx;
  int64_t num_cache_batches;
  const int32_t *cache_leftpad;
  /* A packed batch's new keys (varlen; NULL otherwise): k_new/v_new are
   * [seqlen_new, heads_kv, d] packed rows, sequence b's rows
   * cu_seqlens_k_new[b] .. [b + 1] (int32 [batch + 1]). */
  const int32_t *cu_seqlens_k_new;
} flashjit_kvcache_args;

/* Gradients: dq like q, dk/dv like k/v (summed over the query heads that
 * share a KV head), o and lse from the forward pass. workspace: device memory
 * of flashjit_backward_workspace_bytes(problem), 16-byte aligned. */
typedef struct flashjit_backward_args {
  const void *q, *k, *v, *o, *dout;
  const float *lse;
  void *dq, *dk, *dv;
  int64_t q_stride_batch, q_stride_seq, q_stride_head;
  int64_t k_stride_batch, k_stride_seq, k_stride_head;
  int64_t v_stride_batch, v_stride_seq, v_stride_head;
  int64_t o_stride_batch, o_stride_seq, o_stride_head;
  int64_t do_stride_batch, do_stride_seq, do_stride_head;
  int64_t dq_stride_batch, dq_stride_seq, dq_stride_head;
  int64_t dk_stride_batch, dk_stride_seq, dk_stride_head;
  int64_t dv_stride_batch, dv_stride_seq, dv_stride_head;
  void *workspace;
  uint64_t workspace_bytes;
} flashjit_backward_args;

/* Kernel configuration; zero fields are filled by the heuristic. path:
 * FLASHJIT_PATH_AUTO lets flashjit choose the family (sm90 on Hopper where
 * it serves the problem). Fields are only ever appended, so a zeroed struct
 * of an older header keeps its meaning. */
typedef struct flashjit_config {
  int32_t path, block_m, block_n, warps, stages;
  int32_t deterministic; /* backward: dQ without atomics, bit-identical runs */
  /* forward: split each work tile's key range over this many CTAs (0: the
   * heuristic picks per call, 1: off; at most 256) */
  int32_t splits;
  int32_t pack_gqa; /* forward: enum flashjit_pack_gqa, query heads of a KV head in one tile */
} flashjit_config;

/* stream is a CUstream / cudaStream_t (NULL: the legacy default stream).
 * config may be NULL. */
int flashjit_forward(const flashjit_problem *problem, const flashjit_forward_args *args,
                     void *stream, const flashjit_config *config);

/* flashjit_forward over a KV cache; cache may be NULL only for a problem
 * without one (then the same as flashjit_forward). */
int flashjit_forward_kvcache(const flashjit_problem *problem, const flashjit_forward_args *args,
                             const flashjit_kvcache_args *cache, void *stream,
                             const flashjit_config *config);

/* A packed batch (flash_attn_varlen_func), for a problem with varlen = 1:
 * q/o of flashjit_forward_args are [total_q, heads_q, d] and k/v [total_k,
 * heads_kv, d] (batch strides unused), sequence b owning rows
 * cu_seqlens_q[b] .. cu_seqlens_q[b + 1] (int32 [batch + 1] device arrays,
 * likewise cu_seqlens_k); seqlen_q/seqlen_k are the longest lengths; lse is
 * [heads_q, total_q]. Offsets are clamped to the tensors on the device. */
typedef struct flashjit_varlen_args {
  const int32_t *cu_seqlens_q, *cu_seqlens_k;
  int64_t total_q, total_k;
  /* Optional (NULL): int32 [batch], the queries each sequence uses (its
   * first seqused_q[b] rows; the others' O, LSE and dQ are unspecified, and
   * their q and dO must hold finite values: the backward reads whole tiles). */
  const int32_t *seqused_q;
  /* The backward's key counts for a problem with seqused_k (int32 [batch];
   * the forward takes them as flashjit_kvcache_args::cache_seqlens). */
  const int32_t *seqused_k;
} flashjit_varlen_args;

int flashjit_forward_varlen(const flashjit_problem *problem, const flashjit_forward_args *args,
                            const flashjit_varlen_args *varlen, void *stream,
                            const flashjit_config *config);

/* The serving call (flash_attn_varlen_func with seqused_k and block_table):
 * a packed batch of queries, as flashjit_forward_varlen, over a KV cache,
 * for a problem with varlen = 1 and seqused_k and/or page_size set.
 * cache->cache_seqlens is seqused_k: sequence b's key count (int32 [batch]);
 * without it the counts are cu_seqlens_k's differences. Paged (page_size >
 * 0): k/v are the cache [num_pages, page_size, heads_kv, d], row b of
 * cache->page_table lists sequence b's pages, seqlen_k is the table's width
 * times page_size, varlen->total_k is 0 and cu_seqlens_k may be NULL when
 * cache_seqlens is given. Contiguous: k/v are packed as in
 * flashjit_forward_varlen and sequence b's keys start at cu_seqlens_k[b].
 * Causal masks and windows align each sequence's queries with the end of
 * its keys. The cache is read as it is (no k_new/v_new). */
int flashjit_forward_varlen_kvcache(const flashjit_problem *problem,
                                    const flashjit_forward_args *args,
                                    const flashjit_varlen_args *varlen,
                                    const flashjit_kvcache_args *cache, void *stream,
                                    const flashjit_config *config);

/* A caller's score and mask modifiers (include/flashjit/modifiers.h): CUDA
 * source compiled into the forward kernel, its hash keying the kernel.
 * score_mod, mask_mod: NUL-terminated source defining
 *   float score_mod(float score, int b, int h, int q, int k)
 *   bool mask_mod(int b, int h, int q, int k)
 * or NULL; aux: the extra inputs' declarations, "const float* slopes, int n"
 * (each function then takes `const Aux &aux` last), or NULL; aux_values:
 * aux_count values, one per declared field, by name. The backward
 * (flashjit_backward_modified) takes the same, with score_mod_grad. */
enum flashjit_aux_kind {
  FLASHJIT_AUX_POINTER = 0,
  FLASHJIT_AUX_INTEGER = 1,
  FLASHJIT_AUX_REAL = 2
};
enum flashjit_mask_mod_qk_only {
  FLASHJIT_MASK_MOD_QK_ONLY_AUTO = 0,
  FLASHJIT_MASK_MOD_QK_ONLY_ON = 1,
  FLASHJIT_MASK_MOD_QK_ONLY_OFF = 2
};
typedef struct flashjit_aux_value {
  const char *name;
  int32_t kind;     /* enum flashjit_aux_kind: which of the three below is read */
  int32_t reserved; /* 0 */
  const void *pointer;
  int64_t integer;
  double real;
} flashjit_aux_value;
/* Later versions append fields (sinks, then block_mask did): zero-initialize
 * it ({0}) and build against the flashjit.h of the library you load. */
typedef struct flashjit_modifiers {
  const char *score_mod, *mask_mod, *aux;
  const flashjit_aux_value *aux_values;
  int64_t aux_count;
  /* enum flashjit_mask_mod_qk_only: whether one block map of the tiles
   * mask_mod hides or shows whole serves every batch and head
   * (Modifiers::mask_mod_qk_only). AUTO (0): where the compiled mask_mod
   * reads neither b nor h (flashjit_inspect_modifiers); ON (1): declared
   * so (a mask that reads b or h is then wrong); OFF (2): a map per
   * (batch, head). */
  int32_t mask_mod_qk_only;
  int32_t reserved; /* 0 */
  /* NUL-terminated source defining
   *   float score_mod_grad(float score, int b, int h, int q, int k)
   * (d score_mod / d score, for the backward), or NULL: the backward then
   * uses the one score_mod's source defines (it needs one of the two, and
   * refuses both). */
  const char *score_mod_grad;
  /* Learned attention sinks (GPT-OSS): heads_q fp32 logits on the device,
   * in natural-log units (not multiplied by softmax_scale), each joining
   * its head's softmax denominators as a key without a value; or NULL. The
   * backward then also writes their gradient to dsinks (heads_q fp32 on the
   * device, overwritten, not accumulated); the forward ignores dsinks. */
  const float *sinks;
  float *dsinks;
  /* A block mask of mask_mod built by the caller (below), or NULL: the
   * kernel's pre-pass classifies its tiles with mask_mod. */
  const struct flashjit_block_mask *block_mask;
} flashjit_modifiers;

/* A block mask (flashjit::BlockMask in include/flashjit/modifiers.h;
 * FlexAttention's BlockMask layout): per (batch, head, block of block_q
 * queries) the blocks of block_k keys it sees in part and those it sees
 * whole, each a count ([batches][heads][q_blocks] int32 on the device) and
 * a row of k_blocks indices ([batches][heads][q_blocks][k_blocks] int32);
 * full_* both NULL: no full blocks. batches and heads are 1 or the
 * problem's; q_blocks and k_blocks cover seqlen_q and seqlen_k. It must
 * agree with mask_mod, which it needs. */
typedef struct flashjit_block_mask {
  int32_t block_q, block_k;
  int64_t batches, heads, q_blocks, k_blocks;
  const int32_t *kv_num_blocks, *kv_indices;
  const int32_t *full_kv_num_blocks, *full_kv_indices;
} flashjit_block_mask;

/* Builds the block mask of modifiers->mask_mod (with its aux values; its
 * block_mask must be NULL) for problem's lengths on the GPU into *out's four
 * arrays (device int32 of the caller, written whole despite the const of
 * the struct that describes them; batches and heads 1 where mask_mod_qk_only
 * is ON, or AUTO and flashjit_inspect_modifiers finds it so, else the
 * problem's, which always serve), to pass as modifiers->block_mask
 * to every call with the same modifiers and aux values: the tile
 * classification a call runs each time, run once. Returns 0, or nonzero
 * with flashjit_last_error saying which input was wrong. */
int flashjit_create_block_mask(const flashjit_problem *problem,
                               const flashjit_modifiers *modifiers,
                               const flashjit_block_mask *out, void *stream);

/* The shipped modifiers (include/flashjit/mods.h) by name: "alibi",
 * "relative_bias", "document_mask", "prefix_lm", "sliding_window_with_sinks",
 * "causal_mask". Fills *out's score_mod, score_mod_grad,
 * mask_mod and aux (the declarations, e.g. "const float* slopes") with
 * strings that live as long as the process (NULL where the modifier has
 * none) and mask_mod_qk_only; clears the rest (aux_values, sinks). The
 * caller then gives the aux values by those names. Returns 0, or nonzero
 * with flashjit_last_error naming the known modifiers. */
int flashjit_shipped_modifiers(const char *name, flashjit_modifiers *out);

/* What flashjit finds in modifiers' sources (aux_values are not read) by
 * compiling small probes with NVRTC, once per source and target in a
 * process: whether score_mod's source defines its score_mod_grad (with the
 * parameters the backward passes), and which of b and h the compiled
 * mask_mod reads, for arch (e.g. "sm_90a"; NULL: the current device's). */
typedef struct flashjit_modifier_facts {
  int32_t score_mod_defines_grad;
  int32_t mask_mod_reads_b, mask_mod_reads_h; /* 0 without a mask_mod */
  /* The block maps a call builds: 1 one for every batch and head, 0 one per
   * (batch, head): mask_mod_qk_only where ON or OFF, else the probe's. */
  int32_t mask_mod_qk_only;
} flashjit_modifier_facts;
int flashjit_inspect_modifiers(const flashjit_modifiers *modifiers, const char *arch,
                               flashjit_modifier_facts *out);

/* flashjit_forward with modifiers (NULL: none); the other arguments as
 * flashjit_forward's. */
int flashjit_forward_modified(const flashjit_problem *problem, const flashjit_forward_args *args,
                              const flashjit_modifiers *modifiers, void *stream,
                              const flashjit_config *config);

int flashjit_backward(const flashjit_problem *problem, const flashjit_backward_args *args,
                      void *stream, const flashjit_config *config);
/* The backward of a packed batch (varlen = 1): the tensors as
 * flashjit_forward_varlen's (dq like q, dk/dv like k/v), lse [heads_q,
 * total_q]; workspace of flashjit_backward_varlen_workspace_bytes. */
/* flashjit_backward with the forward's modifiers (NULL: none): a score_mod
 * needs its score_mod_grad, given apart or defined in its own source. */
int flashjit_backward_modified(const flashjit_problem *problem, const flashjit_backward_args *args,
                               const flashjit_modifiers *modifiers, void *stream,
                               const flashjit_config *config);
int flashjit_backward_varlen(const flashjit_problem *problem, const flashjit_backward_args *args,
                             const flashjit_varlen_args *varlen, void *stream,
                             const flashjit_config *config);
/* 0 when the problem's sizes are invalid. */
uint64_t flashjit_backward_workspace_bytes(const flashjit_problem *problem);
/* A packed batch's: heads_q * total_q * (head_dim_qk + 1) * 4; 0 when invalid. */
uint64_t flashjit_backward_varlen_workspace_bytes(const flashjit_problem *problem,
                                                  int64_t total_q);

const char *flashjit_last_error(void);
const char *flashjit_version(void);
/* Number of NVRTC compilations this process has performed. */
uint64_t flashjit_compile_count(void);
/* One of this process's runtime counters, by name: "compiles",
 * "module_loads", "launches", and the host time spent in nanoseconds:
 * "compile_ns" (NVRTC), "compiler_wait_ns" (waiting for NVRTC to load),
 * "database_ns" (opening the tuning database, reading and storing its rows),
 * "module_load_ns" (loading cubins into the context). UINT64_MAX for an
 * unknown name. */
uint64_t flashjit_runtime_stat(const char *name);
/* Starts loading NVRTC in the background (once a process; returns at once):
 * a first call's cubin key names NVRTC's version, and loading the library
 * takes a few milliseconds that a caller can overlap with its own setup.
 * The Python package calls it when it loads the library. */
void flashjit_preload_compiler(void);

#ifdef __cplusplus
}
#endif

#endif /* FLASHJIT_FLASHJIT_H */
