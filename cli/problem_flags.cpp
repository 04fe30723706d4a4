#include "cli/problem_flags.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "generator/kernel_spec.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit::cli {

namespace {

llvm::Error flag_error(llvm::StringRef flag, llvm::StringRef expected, llvm::StringRef got) {
  return llvm::createStringError(
      llvm::inconvertibleErrorCode(),
      llvm::formatv("--{0}: expected {1}, got {2}", flag, expected, got.empty() ? llvm::StringRef("''") : got).str());
}

// getAsInteger rejects signs, spaces and trailing junk alike.
// `too_large`, when given, is what a well-formed value above `hi` is told
// ("a positive integer" would be wrong for it).
llvm::Expected<int64_t> parse_int(llvm::StringRef flag, llvm::StringRef text, int64_t lo,
                                  int64_t hi, llvm::StringRef expected,
                                  llvm::StringRef too_large = {}) {
  int64_t value = 0;
  if (!text.getAsInteger(10, value) && value > hi && !too_large.empty())
    return flag_error(flag, too_large, text);
  if (text.getAsInteger(10, value) || value < lo || value > hi)
    return flag_error(flag, expected, text);
  return value;
}

llvm::Expected<float> parse_float(llvm::StringRef flag, llvm::StringRef text,
                                  llvm::StringRef expected) {
  const std::string copy = text.str();
  char *end = nullptr;
  const double value = copy.empty() ? NAN : std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value) || value < 0 ||
      value > 3.0e38)
    return flag_error(flag, expected, text);
  return static_cast<float>(value);
}

constexpr int64_t kMaxLength = int64_t(1) << 31;  // the kernels index rows with int
constexpr const char *kPositive = "a positive integer";
constexpr const char *kTileField = "0 (heuristic) or a positive integer";
constexpr const char *kGridMax = "at most 65535 (a grid dimension)";
constexpr const char *kLengthMax = "at most 2147483647 (rows are 32-bit)";
constexpr const char *kTileMax = "at most 1024";
constexpr int64_t kMaxSplits = 256;  // flashjit_config.splits' bound (flashjit.h)
constexpr const char *kSplits = "0 (heuristic), 1 (off) or a number of splits up to 256";

llvm::Error parse_mask(const ProblemFlagValues &v, Problem &p) {
  llvm::StringRef text = v.mask;
  constexpr const char *kExpected = "none, causal or window:LEFT,RIGHT (-1: unbounded)";
  if (text == "none") {
    p.mask = MaskKind::none;
  } else if (text == "causal") {
    p.mask = MaskKind::causal;
  } else if (text.startswith("window:")) {
    auto [left, right] = text.drop_front(7).split(',');
    int64_t l = 0, r = 0;
    if (left.getAsInteger(10, l) || right.getAsInteger(10, r) || l < -1 || r < -1)
      return flag_error("mask", kExpected, text);
    p.mask = MaskKind::window;
    p.window_left = l;
    p.window_right = r;
  } else {
    return flag_error("mask", kExpected, text);
  }
  if (v.causal && p.mask != MaskKind::causal && p.mask != MaskKind::none)
    return flag_error("causal", "no --mask other than causal beside it", text);
  if (v.causal) p.mask = MaskKind::causal;
  return llvm::Error::success();
}

// A comma-separated list of sequence lengths (each >= 0), at most 65535 of
// them, whose total fits the kernels' 32-bit rows.
llvm::Expected<std::vector<int64_t>> parse_lengths(llvm::StringRef flag, llvm::StringRef text) {
  constexpr const char *kExpected = "comma-separated lengths >= 0, e.g. 17,4096,300";
  llvm::SmallVector<llvm::StringRef, 16> items;
  text.split(items, ',');
  if (items.size() > 65535)
    return flag_error(flag, "at most 65535 sequences (a grid dimension)",
                      llvm::formatv("{0} of them", items.size()).str());
  std::vector<int64_t> out;
  int64_t total = 0;
  for (llvm::StringRef item : items) {
    auto n = parse_int(flag, item, 0, kMaxLength - 1, kExpected, kLengthMax);
    if (!n) return n.takeError();
    out.push_back(*n);
    total += *n;
  }
  if (total >= kMaxLength)
    return flag_error(flag, "a total below 2147483648 (rows are 32-bit)",
                      llvm::formatv("{0} in all", total).str());
  if (total == 0) return flag_error(flag, "at least one sequence of length > 0", text);
  return out;
}

// --seqlens-q/--seqlens-k: the packed batch's sequences give the batch, the
// longest lengths and the totals.
llvm::Error parse_packed_lengths(const ProblemFlagValues &v, ParsedProblem &out) {
  if (v.seqlens_q.empty() && v.seqlens_k.empty()) return llvm::Error::success();
  const char *flag = v.seqlens_q.empty() ? "seqlens-k" : "seqlens-q";
  const std::string &given = v.seqlens_q.empty() ? v.seqlens_k : v.seqlens_q;
  if (!v.varlen)
    return flag_error(flag, "--varlen beside it (lengths describe a packed batch)", given);
  if (v.seqlens_q.empty()) return flag_error("seqlens-k", "--seqlens-q beside it", given);
  if (!v.sizes_given.empty())
    return flag_error(flag,
                      llvm::formatv("no {0} beside it (the lengths give the batch and the longest "
                                    "sequence)",
                                    v.sizes_given)
                          .str(),
                      given);
  auto q = parse_lengths("seqlens-q", v.seqlens_q);
  if (!q) return q.takeError();
  std::vector<int64_t> k = *q;
  if (!v.seqlens_k.empty()) {
    auto parsed = parse_lengths("seqlens-k", v.seqlens_k);
    if (!parsed) return parsed.takeError();
    if (parsed->size() != q->size())
      return flag_error("seqlens-k",
                        llvm::formatv("{0} lengths, one per sequence of --seqlens-q", q->size()).str(),
                        llvm::formatv("{0}", parsed->size()).str());
    k = std::move(*parsed);
  }
  Problem &p = out.problem;
  p.batch = static_cast<int64_t>(q->size());
  p.seqlen_q = p.seqlen_k = 0;
  for (size_t b = 0; b < q->size(); ++b) {
    p.seqlen_q = std::max(p.seqlen_q, (*q)[b]);
    p.seqlen_k = std::max(p.seqlen_k, k[b]);
    out.total_q += (*q)[b];
    out.total_k += k[b];
  }
  // Over a paged cache seqlen_k is the cache's capacity per sequence: the
  // longest sequence's keys rounded up to whole pages.
  if (p.page_size > 0) p.seqlen_k = (p.seqlen_k + p.page_size - 1) / p.page_size * p.page_size;
  out.seqlens_q = std::move(*q);
  out.seqlens_k = std::move(k);
  return llvm::Error::success();
}

}  // namespace

llvm::Expected<ParsedProblem> parse_problem_flags(const ProblemFlagValues &v) {
  ParsedProblem out;
  Problem &p = out.problem;

  if (v.dtype == "bf16") {
    p.dtype = DType::bf16;
  } else if (v.dtype == "fp16") {
    p.dtype = DType::fp16;
  } else if (v.dtype == "e4m3") {
    p.dtype = DType::e4m3;
  } else {
    return flag_error("dtype", "bf16, fp16 or e4m3", v.dtype);
  }
  if (v.kv_dtype == "same") {
    p.kv_dtype = KvDType::same;
  } else if (v.kv_dtype == "e4m3") {
    p.kv_dtype = KvDType::e4m3;
  } else {
    return flag_error("kv-dtype", "same or e4m3", v.kv_dtype);
  }
  if (v.out_dtype == "auto") {
    p.out_dtype = OutDType::automatic;
  } else if (v.out_dtype == "bf16") {
    p.out_dtype = OutDType::bf16;
  } else if (v.out_dtype == "fp16") {
    p.out_dtype = OutDType::fp16;
  } else {
    return flag_error("out-dtype", "auto, bf16 or fp16", v.out_dtype);
  }
  if (p.dtype != DType::e4m3 && p.out_dtype != OutDType::automatic &&
      out_element(p) != p.dtype)
    return flag_error("out-dtype",
                      llvm::formatv("auto or {0} with --dtype {0} (a 16-bit problem's output has "
                                    "its dtype)",
                                    v.dtype)
                          .str(),
                      v.out_dtype);

  auto batch = parse_int("batch", v.batch, 1, 65535, kPositive, kGridMax);
  if (!batch) return batch.takeError();
  p.batch = *batch;
  auto heads = parse_int("heads", v.heads, 1, 65535, kPositive, kGridMax);
  if (!heads) return heads.takeError();
  p.heads_q = *heads;
  p.heads_kv = p.heads_q;
  if (!v.heads_kv.empty()) {
    const std::string expected = llvm::formatv("a divisor of --heads ({0})", p.heads_q).str();
    auto heads_kv = parse_int("heads-kv", v.heads_kv, 1, p.heads_q, expected);
    if (!heads_kv) return heads_kv.takeError();
    if (p.heads_q % *heads_kv != 0) return flag_error("heads-kv", expected, v.heads_kv);
    p.heads_kv = *heads_kv;
  }

  auto seqlen = parse_int("seqlen", v.seqlen, 1, kMaxLength - 1, kPositive, kLengthMax);
  if (!seqlen) return seqlen.takeError();
  p.seqlen_q = p.seqlen_k = *seqlen;
  if (!v.seqlen_q.empty()) {
    auto n = parse_int("seqlen-q", v.seqlen_q, 1, kMaxLength - 1, kPositive, kLengthMax);
    if (!n) return n.takeError();
    p.seqlen_q = *n;
  }
  if (!v.seqlen_k.empty()) {
    auto n = parse_int("seqlen-k", v.seqlen_k, 1, kMaxLength - 1, kPositive, kLengthMax);
    if (!n) return n.takeError();
    p.seqlen_k = *n;
  }

  // Past 256 on sm_90a only (the kernels refuse with their reasons).
  constexpr int kMaxHeadDim = kSm90ForwardMaxHeadDim;
  constexpr const char *kHeadDim = "a multiple of 8 in [8, 576]";
  auto hdim = parse_int("hdim", v.hdim, 8, kMaxHeadDim, kHeadDim);
  if (!hdim) return hdim.takeError();
  if (*hdim % 8 != 0) return flag_error("hdim", kHeadDim, v.hdim);
  p.head_dim_qk = p.head_dim_v = static_cast<int>(*hdim);
  if (!v.hdim_v.empty()) {
    auto hdim_v = parse_int("hdim-v", v.hdim_v, 8, kMaxHeadDim, kHeadDim);
    if (!hdim_v) return hdim_v.takeError();
    if (*hdim_v % 8 != 0) return flag_error("hdim-v", kHeadDim, v.hdim_v);
    p.head_dim_v = static_cast<int>(*hdim_v);
  }

  if (auto error = parse_mask(v, p)) return error;
  auto chunk = parse_int("attention-chunk", v.attention_chunk, 0, 0x7fffffff,
                         "0 (off) or a chunk length > 0");
  if (!chunk) return chunk.takeError();
  p.attention_chunk = static_cast<int>(*chunk);
  auto softcap = parse_float("softcap", v.softcap, "a finite number >= 0 (0: off)");
  if (!softcap) return softcap.takeError();
  p.softcap = *softcap;
  auto scale = parse_float("scale", v.scale, "a finite number >= 0 (0: 1/sqrt(hdim))");
  if (!scale) return scale.takeError();
  p.softmax_scale = *scale;
  auto page_size = parse_int("page-size", v.page_size, 0, 512, "0 (contiguous) or 1 to 512 rows");
  if (!page_size) return page_size.takeError();
  p.page_size = static_cast<int>(*page_size);
  p.seqused_k = v.cache_seqlens;
  p.varlen = v.varlen;
  if (auto error = parse_packed_lengths(v, out)) return error;

  KernelConfig &c = out.config;
  if (v.path == "sm80") {
    c.path = KernelPath::sm80;
  } else if (v.path == "sm90") {
    c.path = KernelPath::sm90;
  } else if (v.path == "auto") {
    c.path = KernelPath::automatic;
  } else {
    return flag_error("path", "auto, sm80 or sm90", v.path);
  }
  struct Field {
    const char *flag;
    const std::string &text;
    int &value;
  };
  for (const Field &f : {Field{"block-m", v.block_m, c.block_m},
                         Field{"block-n", v.block_n, c.block_n}, Field{"warps", v.warps, c.warps},
                         Field{"stages", v.stages, c.stages}}) {
    auto n = parse_int(f.flag, f.text, 0, 1024, kTileField, kTileMax);
    if (!n) return n.takeError();
    f.value = static_cast<int>(*n);
  }

  auto splits = parse_int("splits", v.splits, 0, kMaxSplits, kSplits);
  if (!splits) return splits.takeError();
  c.splits = static_cast<int>(*splits);
  if (v.pack_gqa == "auto") {
    c.pack_gqa = GqaPacking::automatic;
  } else if (v.pack_gqa == "on") {
    c.pack_gqa = GqaPacking::on;
  } else if (v.pack_gqa == "off") {
    c.pack_gqa = GqaPacking::off;
  } else {
    return flag_error("pack-gqa", "auto, on or off", v.pack_gqa);
  }

  if (v.pass == "fwd") {
    out.pass = Pass::forward;
  } else if (v.pass == "bwd") {
    out.pass = Pass::backward;
  } else {
    return flag_error("pass", "fwd or bwd", v.pass);
  }
  if (v.deterministic && out.pass != Pass::backward)
    return flag_error("deterministic", "--pass bwd (it only changes the backward)", "--pass fwd");
  // The backward has neither knob; taking one silently would time or check
  // something other than what was asked for.
  if (out.pass == Pass::backward && c.splits != 0)
    return flag_error("splits", "0 with --pass bwd (it only changes the forward)", v.splits);
  if (out.pass == Pass::backward && c.pack_gqa != GqaPacking::automatic)
    return flag_error("pack-gqa", "auto with --pass bwd (it only changes the forward)",
                      v.pack_gqa);
  if (out.pass == Pass::backward && (p.dtype == DType::e4m3 || p.kv_dtype == KvDType::e4m3))
    return flag_error(p.dtype == DType::e4m3 ? "dtype" : "kv-dtype",
                      "bf16 or fp16 with --pass bwd (the fp8 backward is not supported; "
                      "FlashAttention-3 has none either)",
                      p.dtype == DType::e4m3 ? v.dtype : v.kv_dtype);
  if (out.pass == Pass::backward && p.page_size != 0)
    return flag_error("page-size", "0 with --pass bwd (a KV cache is a forward input)",
                      v.page_size);
  if (out.pass == Pass::backward && p.seqused_k)
    return flag_error("cache-seqlens", "--pass fwd (a KV cache is a forward input)",
                      "--pass bwd");
  c.deterministic = v.deterministic;

  if (auto error = validate_problem(p)) return error;
  return out;
}

}  // namespace flashjit::cli
