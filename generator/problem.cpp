// The public Problem/KernelConfig helpers: naming and FLOP counting.
#include <cmath>

#include "flashjit/problem.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

float Problem::effective_scale() const {
  return softmax_scale != 0.f ? softmax_scale : 1.f / std::sqrt(static_cast<float>(head_dim_qk));
}

double Problem::forward_flops() const {
  // FlashAttention's convention (benchmarks/benchmark_flash_attention.py):
  // two GEMMs of 2*sq*sk*d each, half of them skipped under a causal mask.
  double flops = 2.0 * static_cast<double>(batch) * heads_q * seqlen_q * seqlen_k *
                 (head_dim_qk + head_dim_v);
  return mask == MaskKind::causal ? flops / 2 : flops;
}

const char *to_string(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::e4m3: return "e4m3";
  }
  return "?";
}

const char *to_string(KvDType dtype) { return dtype == KvDType::e4m3 ? "e4m3" : "same"; }

const char *to_string(OutDType dtype) {
  switch (dtype) {
    case OutDType::automatic: return "auto";
    case OutDType::bf16: return "bf16";
    case OutDType::fp16: return "fp16";
  }
  return "?";
}

DType kv_element(const Problem &problem) {
  return problem.kv_dtype == KvDType::e4m3 ? DType::e4m3 : problem.dtype;
}

DType out_element(const Problem &problem) {
  switch (problem.out_dtype) {
    case OutDType::bf16: return DType::bf16;
    case OutDType::fp16: return DType::fp16;
    case OutDType::automatic: break;
  }
  return problem.dtype == DType::e4m3 ? DType::bf16 : problem.dtype;
}

int element_bytes(DType dtype) { return dtype == DType::e4m3 ? 1 : 2; }

const char *to_string(MaskKind mask) {
  switch (mask) {
    case MaskKind::none: return "none";
    case MaskKind::causal: return "causal";
    case MaskKind::window: return "window";
  }
  return "?";
}

const char *to_string(KernelPath path) {
  switch (path) {
    case KernelPath::sm80: return "sm80";
    case KernelPath::sm90: return "sm90";
    case KernelPath::automatic: return "auto";
  }
  return "?";
}

const char *to_string(GqaPacking packing) {
  switch (packing) {
    case GqaPacking::automatic: return "auto";
    case GqaPacking::on: return "on";
    case GqaPacking::off: return "off";
  }
  return "?";
}

std::string describe(const Problem &p) {
  std::string mask = to_string(p.mask);
  if (p.mask == MaskKind::window)
    mask = llvm::formatv("window({0},{1})", p.window_left, p.window_right).str();
  if (p.attention_chunk > 0) mask += llvm::formatv("+chunk({0})", p.attention_chunk).str();
  std::string text = llvm::formatv("{0} b={1} hq={2} hkv={3} sq={4} sk={5} d={6} dv={7} {8}",
                                   to_string(p.dtype), p.batch, p.heads_q, p.heads_kv, p.seqlen_q,
                                   p.seqlen_k, p.head_dim_qk, p.head_dim_v, mask)
                         .str();
  // Element types only where they differ from the inputs', so the 16-bit
  // problems read as before.
  if (kv_element(p) != p.dtype) text += std::string(" kv=") + to_string(kv_element(p));
  if (out_element(p) != p.dtype) text += std::string(" out=") + to_string(out_element(p));
  if (p.softcap != 0.f) text += llvm::formatv(" softcap={0}", p.softcap).str();
  if (p.seqused_k) text += " seqused_k";
  if (p.page_size > 0) text += llvm::formatv(" page={0}", p.page_size).str();
  if (p.varlen) text += " varlen";
  return text;
}

std::string describe(const KernelConfig &c) {
  // The forward's decode fields only where they change the kernel, so the
  // common case reads as before.
  std::string decode;
  if (c.splits > 1) decode += llvm::formatv(" splits={0}", c.splits).str();
  if (c.pack_gqa == GqaPacking::on) decode += " pack_gqa";
  return llvm::formatv("{0} block_m={1} block_n={2} warps={3} stages={4}{5}{6}", to_string(c.path),
                       c.block_m, c.block_n, c.warps, c.stages,
                       c.deterministic ? " deterministic" : "", decode)
      .str();
}

}  // namespace flashjit
