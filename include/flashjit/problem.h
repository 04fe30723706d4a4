// The attention problem a caller asks flashjit to solve, and the kernel
// configuration that solves it. Plain data: no CUDA, no LLVM.
#pragma once

#include <cstdint>
#include <string>

namespace flashjit {

// Element types. e4m3 is fp8 (torch.float8_e4m3fn): 1 sign, 4 exponent, 3
// mantissa bits, no infinities, 448 at most; its tensors come with fp32
// dequantization factors (ForwardArgs::descale).
enum class DType : uint8_t { bf16, fp16, e4m3 };

// K's and V's elements where they differ from Q's: an fp8 KV cache (e4m3)
// read by 16-bit queries. `same`: Q's dtype.
enum class KvDType : uint8_t { same, e4m3 };

// O's elements: `automatic` is Q's dtype for 16-bit queries and bf16 for
// e4m3 ones (FlashAttention-3's fp8 output); bf16 or fp16 ask for one.
enum class OutDType : uint8_t { automatic, bf16, fp16 };

// Bottom-right aligned, as FlashAttention >= 2.1: query row i sees key j when
//   i + (seqlen_k - seqlen_q) - left <= j <= i + (seqlen_k - seqlen_q) + right.
// `causal` is window(-1, 0); a bound of -1 is unbounded.
enum class MaskKind : uint8_t { none, causal, window };

struct Problem {
  DType dtype = DType::bf16;  // Q's; K's, V's and O's too unless the next two say otherwise
  KvDType kv_dtype = KvDType::same;
  OutDType out_dtype = OutDType::automatic;
  int64_t batch = 1;
  int64_t heads_q = 1;
  int64_t heads_kv = 1;  // heads_q must be a multiple (GQA / MQA)
  int64_t seqlen_q = 1;
  int64_t seqlen_k = 1;
  int head_dim_qk = 128;
  int head_dim_v = 128;
  MaskKind mask = MaskKind::none;
  int64_t window_left = -1;   // only read when mask == window
  int64_t window_right = -1;  // only read when mask == window
  // Chunked attention (Llama 4's local layers; FlashAttention-3's
  // attention_chunk): > 0 keeps query i to the keys of the chunk of this
  // many positions that holds its position i + seqlen_k - seqlen_q, on top
  // of the mask (causal within the chunk, say). 0: off.
  int attention_chunk = 0;
  float softmax_scale = 0.f;  // 0 means 1/sqrt(head_dim_qk)
  float softcap = 0.f;        // 0 means off; else scores = softcap*tanh(s/softcap)
  // A KV cache (forward only; ForwardArgs::cache). seqused_k: each
  // sequence's key count is read from a device array (cache_seqlens) and is
  // at most seqlen_k, the cache's capacity; masks align bottom-right against
  // each sequence's own count.
  bool seqused_k = false;
  // K and V are [num_pages, page_size, heads_kv, d] pages that a page table
  // maps to each sequence's keys; seqlen_k is then the table's width times
  // page_size. 0: K and V are contiguous [batch, seqlen_k, heads_kv, d].
  // A multiple of 16 from 16 to 512.
  int page_size = 0;
  // A packed batch of sequences of different lengths (flash_attn_varlen_func;
  // ForwardArgs::varlen, BackwardArgs::varlen): Q/O are [total_q, heads_q,
  // d] and K/V [total_k, heads_kv, d], sequence b owning the rows from
  // cu_seqlens_q[b] to cu_seqlens_q[b + 1] (likewise of K/V); batch is the
  // number of sequences and seqlen_q/seqlen_k are the longest's lengths
  // (max_seqlen_q/max_seqlen_k). Masks align bottom-right per sequence.
  bool varlen = false;

  float effective_scale() const;
  // FlashAttention's convention: 4*b*h*sq*sk*d, halved when causal.
  double forward_flops() const;
};

// Which kernel family runs the problem. `automatic` lets flashjit choose:
// sm90 (TMA + wgmma) on Hopper for the head dims it serves, else sm80.
enum class KernelPath : uint8_t { sm80, sm90, automatic };

// Whether the query heads that share a KV head are packed into the rows of
// one tile (FlashAttention-3's pack_gqa), so each K/V tile is read once per
// group instead of once per query head: what decode needs. `automatic` lets
// the heuristic decide from the problem's shape.
enum class GqaPacking : uint8_t { automatic, on, off };

// Tile and pipeline parameters. A zero field means "let the heuristic pick".
struct KernelConfig {
  KernelPath path = KernelPath::automatic;
  int block_m = 0;
  int block_n = 0;
  int warps = 0;
  int stages = 0;
  // Backward only: compute dQ without atomics, in a fixed order, so that
  // gradients are bit-identical run to run (two more GEMMs of work).
  bool deterministic = false;
  // Forward: the key range of every work tile is split over this many CTAs
  // whose partial results a combine kernel merges by their log-sum-exps
  // (flash-decoding). 0: the heuristic picks per call from the SMs, the work
  // tiles and the key length; 1: off.
  int splits = 0;
  GqaPacking pack_gqa = GqaPacking::automatic;

  bool is_complete() const { return block_m > 0 && block_n > 0 && warps > 0 && stages > 0; }
  bool operator==(const KernelConfig &) const = default;
};

const char *to_string(DType dtype);
const char *to_string(KvDType dtype);   // "same" | "e4m3"
const char *to_string(OutDType dtype);  // "auto" | "bf16" | "fp16"
// The element types a problem's tensors have: K's and V's, and O's.
DType kv_element(const Problem &problem);
DType out_element(const Problem &problem);
// Bytes of one element.
int element_bytes(DType dtype);
const char *to_string(MaskKind mask);
const char *to_string(KernelPath path);
const char *to_string(GqaPacking packing);  // "auto" | "on" | "off"
// "bf16 b=2 hq=16 hkv=16 sq=8192 sk=8192 d=128 dv=128 causal"
std::string describe(const Problem &problem);
std::string describe(const KernelConfig &config);

}  // namespace flashjit
