// The runtime entry point: exact attention on the GPU with a kernel generated,
// compiled and loaded for this problem class on first use.
#pragma once

#include <cstdint>
#include <string>

#include "flashjit/modifiers.h"
#include "flashjit/problem.h"

struct CUstream_st;  // cuda.h's CUstream is CUstream_st*; so is cudaStream_t

namespace flashjit {

// Element strides of a [batch, seqlen, heads, dim] tensor; dim is contiguous.
struct TensorStrides {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t head = 0;
};

// A KV cache's device data (flash_attn_with_kvcache's arguments), for a
// problem with seqused_k or page_size set. Page indices and key counts are
// device data the host cannot check without a synchronisation; the kernels
// clamp every key count to [0, seqlen_k] and read a page index outside
// [0, num_pages) as a page of zeros, so no content makes them access memory
// outside the cache. Slots of a sequence's last page (or of a contiguous
// cache) past its key count are read and masked: they must hold finite
// values, as a zero-initialised cache does.
struct KvCacheArgs {
  // [batch] int32: each sequence's keys already in the cache (0 allowed).
  // Required when Problem::seqused_k; its key count is then
  // min(cache_seqlens[b] + seqlen_new, seqlen_k). For a packed batch
  // (Problem::varlen; the serving call) it is flash_attn_varlen_func's
  // seqused_k, and the cache is read as it is (no k_new/v_new): with a page
  // table, VarlenArgs::total_k is 0 and cu_seqlens_k may be null.
  const int32_t *cache_seqlens = nullptr;
  // Problem::page_size > 0: K and V are [num_pages, page_size, heads_kv, d]
  // (their strides' `batch` steps from page to page) and row b of
  // page_table ([batch, seqlen_k / page_size] int32, rows page_table_stride
  // elements apart) lists sequence b's pages in key order.
  const int32_t *page_table = nullptr;
  int64_t page_table_stride = 0;
  int64_t num_pages = 0;
  // Optional: this step's keys and values, [batch, seqlen_new, heads_kv, d],
  // written into the cache at positions cache_seqlens[b] .. + seqlen_new - 1
  // (through the page table when paged) before attention reads it, as
  // flash_attn_with_kvcache does; cache_seqlens is not updated (the caller
  // advances it). Positions past seqlen_k, or on a page outside
  // [0, num_pages), are not written. Their elements are Q's dtype: under an
  // fp8 cache (kv_dtype e4m3, 16-bit Q) they are quantized into it with the
  // k/v descales (stored = value / factor, saturated to +-448).
  const void *k_new = nullptr;
  const void *v_new = nullptr;
  int64_t seqlen_new = 0;
  TensorStrides k_new_strides, v_new_strides;
  // A contiguous cache only (page_size 0, not varlen), both optional:
  // cache_batch_idx [batch] int32 places sequence b at K/V batch entry
  // cache_batch_idx[b], K and V then having cache_batches entries (an entry
  // outside [0, cache_batches) reads no keys and appends nothing);
  // cache_leftpad [batch] int32 starts its keys at that row, so it attends
  // to rows cache_leftpad[b] .. its key count - 1 (its new keys are still
  // written at cache_seqlens[b]). flash_attn_with_kvcache's arguments.
  const int32_t *cache_batch_idx = nullptr;
  int64_t cache_batches = 0;
  const int32_t *cache_leftpad = nullptr;
  // A packed batch (Problem::varlen) appending new keys (FlashAttention-3's
  // cu_seqlens_k_new): k_new/v_new are then [seqlen_new, heads_kv, d] packed
  // rows (their strides' `batch` unused), sequence b's rows
  // cu_seqlens_k_new[b] .. cu_seqlens_k_new[b + 1] (int32 [batch + 1]),
  // written at positions cache_seqlens[b].. of its pages (or, contiguous,
  // of its packed rows from cu_seqlens_k[b]); its key count is then
  // cache_seqlens[b] plus those rows.
  const int32_t *cu_seqlens_k_new = nullptr;
};

// A packed batch's device data (flash_attn_varlen_func's arguments), for a
// problem with varlen set: Q/O are [total_q, heads_q, d] and K/V [total_k,
// heads_kv, d] (their strides' `batch` is unused), and sequence b owns rows
// cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of Q and O (int32 [batch + 1],
// starting at 0, non-decreasing, ending at total_q), likewise of K/V. The
// offsets are device data the host cannot check without a synchronisation:
// the kernels clamp them to [0, total] and each length to the problem's
// seqlen_q/seqlen_k (the maxima, which must be at least every sequence's
// length: a longer sequence is cut there), so no content makes them access
// memory outside the tensors. O rows of tokens no sequence owns are
// unspecified. The LSE is [heads_q, total_q].
struct VarlenArgs {
  const int32_t *cu_seqlens_q = nullptr;
  const int32_t *cu_seqlens_k = nullptr;
  int64_t total_q = 0;
  int64_t total_k = 0;
  // Optional [batch] int32 (FlashAttention-3's seqused_q): sequence b uses
  // only its first seqused_q[b] queries (clamped to its cu_seqlens_q
  // length); the other rows of O, the LSE and dQ are left unspecified (the
  // Python binding zeroes dQ's). Their Q and dO must hold finite values: the
  // backward's Hopper kernel reads whole tiles and multiplies those rows by
  // zero, which a NaN or an infinity survives.
  const int32_t *seqused_q = nullptr;
  // The backward's key counts for a problem with seqused_k (a
  // differentiable packed batch; FlashAttention-3's seqused_k): sequence b
  // uses its first seqused_k[b] keys of its cu_seqlens_k rows; dK and dV
  // rows past them are left unwritten (the Python binding zeroes them). The
  // forward takes the same counts as KvCacheArgs::cache_seqlens.
  const int32_t *seqused_k = nullptr;
};

// Device pointers in the current CUDA context (or the primary context of the
// current device). `lse` ([batch, heads_q, seqlen_q] fp32, contiguous) may be
// null when the caller does not need it.
// The fp32 dequantization factors of e4m3 tensors, on the device, indexed
// [batch][kv head] with these element strides (both 0: one factor for the
// whole tensor, e.g. a one-element tensor): q with e4m3 Q (FlashAttention-3
// scales Q per KV head too), k and v with e4m3 K/V, where they are an fp8 KV
// cache's k_scale and v_scale. Null where the tensor is 16-bit; required
// where it is e4m3.
struct Fp8Descales {
  const float *q = nullptr;
  const float *k = nullptr;
  const float *v = nullptr;
  int64_t batch_stride = 0;
  int64_t head_stride = 0;
};

struct ForwardArgs {
  const void *q = nullptr;
  const void *k = nullptr;
  const void *v = nullptr;
  void *o = nullptr;
  float *lse = nullptr;
  TensorStrides q_strides, k_strides, v_strides, o_strides;
  // Read only when the problem has a KV cache (seqused_k or page_size).
  KvCacheArgs cache;
  // Read only when the problem is a packed batch (varlen).
  VarlenArgs varlen;
  // A caller's score and mask modifiers (flashjit/modifiers.h), compiled
  // into the kernel on the first call that passes them (the snippets' hash
  // keys the kernel); null: none. `aux` holds the values of modifiers->aux
  // laid out as its struct Aux (AuxValues packs them by name), aux_bytes
  // its size; both are read at the call. The snippets run with the caller's
  // privileges: what they read through aux pointers is theirs to bound.
  const Modifiers *modifiers = nullptr;
  const void *aux = nullptr;
  size_t aux_bytes = 0;
  // With modifiers->sinks: the learned sinks, heads_q fp32 logits on the
  // device (Modifiers::sinks); else null.
  const float *sinks = nullptr;
  // A block mask of modifiers->mask_mod (flashjit/modifiers.h) built by the
  // caller, e.g. once for every layer; null: the kernel's pre-pass
  // classifies its tiles by calling mask_mod.
  const BlockMask *block_mask = nullptr;
  // e4m3 tensors' dequantization factors (real value = stored * factor).
  Fp8Descales descale;

  // Strides of densely packed [batch, seqlen, heads, dim] tensors.
  static ForwardArgs packed(const Problem &problem, const void *q, const void *k, const void *v,
                            void *o, float *lse);
};

// Success, or a message that names the input that was wrong and what to do.
class Status {
 public:
  Status() = default;
  static Status error(std::string message) { return Status(std::move(message)); }
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const std::string &message() const { return message_; }

 private:
  explicit Status(std::string message) : failed_(true), message_(std::move(message)) {}
  bool failed_ = false;
  std::string message_;
};

struct ForwardOptions {
  // A complete config overrides the heuristic; a partial one fills its zero
  // fields from the heuristic.
  KernelConfig config{};
  bool use_config = false;
};

// Enqueues the forward pass on `stream` (null: the legacy default stream).
// The first call for a problem class compiles its kernel (about a second);
// later calls cost a hash lookup and the launch. Thread-safe: concurrent first
// calls for the same class compile once.
Status forward(const Problem &problem, const ForwardArgs &args, CUstream_st *stream = nullptr,
               const ForwardOptions &options = {});

// Builds the block mask of `modifiers`' mask_mod (with the aux values
// `aux`, aux_bytes as ForwardArgs') for `problem`'s lengths on `stream`, in
// FlexAttention's layout, into `out`'s four arrays (the caller's device
// int32 memory, written whole; out's sizes say their shapes: batches and
// heads 1 where mask_mod reads neither b nor h: mask_mod_qk_only `on`, or
// `automatic` and found so (the problem's always serve). Passed as
// ForwardArgs::block_mask / BackwardArgs::block_mask to every call with the
// same modifiers and aux values (every layer of a step), it spares each
// call its pre-pass. The first build of a mask_mod compiles a small program.
Status create_block_mask(const Problem &problem, const Modifiers &modifiers, const void *aux,
                         size_t aux_bytes, const BlockMask &out, CUstream_st *stream = nullptr);

// Counters for tests and diagnostics.
struct RuntimeStats {
  uint64_t compiles = 0;      // NVRTC compilations performed by this process
  uint64_t module_loads = 0;  // cuModuleLoadData calls
  uint64_t launches = 0;
  // Host time spent, in nanoseconds: what a first call costs and where.
  uint64_t compile_ns = 0;        // in NVRTC
  uint64_t compiler_wait_ns = 0;  // waiting for NVRTC to load (its version keys the cubins)
  uint64_t database_ns = 0;       // opening the tuning database, reading and storing rows
  uint64_t module_load_ns = 0;    // cuModuleLoadData, cuModuleGetFunction, attributes
};
RuntimeStats runtime_stats();

const char *version();

}  // namespace flashjit
