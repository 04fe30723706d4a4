#include "cli/cli_common.h"

#include <optional>

#include "flashjit/kernel_config_fields.h"
#include "flashjit/problem_fields.h"
#include "generator/backward_spec.h"
#include "generator/field_json.h"
#include "generator/heuristic.h"
#include "runtime/device.h"
#include "runtime/tuning_key.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

int report_error(int code, const llvm::Twine &message) {
  llvm::errs() << "flashjit: error: " << message << "\n";
  return code;
}

int report_error(int code, llvm::Error error) {
  return report_error(code, llvm::toString(std::move(error)));
}

// Every problem flag is a string parsed by parse_problem_flags, so that its
// errors name the flag and what it allows (cl::opt<int> would not).
#define FLASHJIT_PROBLEM_FLAG(member, flag, initial, value, help)                          \
  member(flag, cl::init(initial), cl::desc(help), cl::value_desc(value), cl::cat(category), \
         problem_subs)
#define FLASHJIT_CONFIG_FLAG(member, flag, initial, value, help) \
  member(flag, cl::init(initial), cl::desc(help), cl::value_desc(value), cl::cat(category), config_subs)

ProblemOptions::ProblemOptions(cl::OptionCategory &category, const Subs &problem_subs,
                               const Subs &config_subs)
    : FLASHJIT_PROBLEM_FLAG(dtype, "dtype", "bf16", "bf16|fp16|e4m3",
                            "Element type of Q (and of K and V unless --kv-dtype; e4m3: fp8 "
                            "with per-(batch, KV head) descales, forward only; default bf16)"),
      FLASHJIT_PROBLEM_FLAG(kv_dtype, "kv-dtype", "same", "same|e4m3",
                            "Element type of K and V: e4m3 under a 16-bit --dtype is an fp8 KV "
                            "cache (forward only; default same)"),
      FLASHJIT_PROBLEM_FLAG(out_dtype, "out-dtype", "auto", "auto|bf16|fp16",
                            "Element type of O: auto is --dtype's for 16-bit Q, bf16 for e4m3 "
                            "(default auto)"),
      FLASHJIT_PROBLEM_FLAG(batch, "batch", "2", "B", "Batch size (default 2)"),
      FLASHJIT_PROBLEM_FLAG(heads, "heads", "16", "H", "Query heads (default 16)"),
      FLASHJIT_PROBLEM_FLAG(heads_kv, "heads-kv", "", "HK", "Key/value heads (GQA; default --heads)"),
      FLASHJIT_PROBLEM_FLAG(seqlen, "seqlen", "8192", "N", "Sequence length of queries and keys (default 8192)"),
      FLASHJIT_PROBLEM_FLAG(seqlen_q, "seqlen-q", "", "N", "Query length (default --seqlen)"),
      FLASHJIT_PROBLEM_FLAG(seqlen_k, "seqlen-k", "", "N", "Key length (default --seqlen)"),
      FLASHJIT_PROBLEM_FLAG(hdim, "hdim", "128", "D", "Head dim of Q and K: a multiple of 8 up to 576 (past 256 on sm_90a) (default 128)"),
      FLASHJIT_PROBLEM_FLAG(hdim_v, "hdim-v", "", "DV", "Head dim of V (default --hdim)"),
      FLASHJIT_PROBLEM_FLAG(mask, "mask", "none", "none|causal|window:L,R",
                            "Mask, bottom-right aligned; -1 is an unbounded window side"),
      FLASHJIT_PROBLEM_FLAG(attention_chunk, "attention-chunk", "0", "C",
                            "Chunked attention (Llama 4): each query sees only the keys of its "
                            "own chunk of C positions, on top of --mask (0: off)"),
      causal("causal", cl::desc("Same as --mask causal"), cl::cat(category), problem_subs),
      FLASHJIT_PROBLEM_FLAG(softcap, "softcap", "0", "X", "Logit softcap (0: off)"),
      FLASHJIT_PROBLEM_FLAG(scale, "scale", "0", "S", "Softmax scale (0: 1/sqrt(hdim))"),
      FLASHJIT_PROBLEM_FLAG(page_size, "page-size", "0", "N",
                            "Forward: K/V in a paged cache of N-row pages (1 to 512; 0: contiguous)"),
      cache_seqlens("cache-seqlens",
                    cl::desc("Forward: a KV cache whose sequences hold different key counts, up to "
                             "--seqlen-k (run draws them at random; tune times full sequences)"),
                    cl::cat(category), problem_subs),
      varlen("varlen",
             cl::desc("A packed batch of sequences of different lengths (flash_attn_varlen_func): "
                      "--seqlens-q/--seqlens-k, or --batch sequences of up to "
                      "--seqlen-q/--seqlen-k"),
             cl::cat(category), problem_subs),
      FLASHJIT_PROBLEM_FLAG(seqlens_q, "seqlens-q", "", "N,N,...",
                            "With --varlen: each sequence's queries (sets the batch, the longest "
                            "--seqlen-q and the total)"),
      FLASHJIT_PROBLEM_FLAG(seqlens_k, "seqlens-k", "", "N,N,...",
                            "With --varlen: each sequence's keys (default --seqlens-q)"),
      FLASHJIT_CONFIG_FLAG(path, "path", "auto", "auto|sm80|sm90", "Kernel family (auto: sm90 on Hopper where it serves the problem)"),
      FLASHJIT_CONFIG_FLAG(block_m, "block-m", "0", "M", "Query rows per CTA (0: heuristic)"),
      FLASHJIT_CONFIG_FLAG(block_n, "block-n", "0", "N", "Keys per tile (0: heuristic)"),
      FLASHJIT_CONFIG_FLAG(warps, "warps", "0", "W", "Warps per CTA (0: heuristic)"),
      FLASHJIT_CONFIG_FLAG(stages, "stages", "0", "S", "K/V pipeline stages (0: heuristic)"),
      FLASHJIT_CONFIG_FLAG(splits, "splits", "0", "N",
                           "Forward: split each tile's keys over N CTAs (0: heuristic, 1: off; at most 256)"),
      FLASHJIT_CONFIG_FLAG(pack_gqa, "pack-gqa", "auto", "auto|on|off",
                           "Forward: pack the query heads of a KV head into one tile (auto: heuristic)"),
      FLASHJIT_PROBLEM_FLAG(pass, "pass", "fwd", "fwd|bwd", "Which pass's kernels: forward or backward"),
      deterministic("deterministic", cl::desc("Backward: dQ without atomics (bit-identical runs)"),
                    cl::cat(category), problem_subs) {}

#undef FLASHJIT_PROBLEM_FLAG
#undef FLASHJIT_CONFIG_FLAG

ProblemFlagValues ProblemOptions::values() const {
  ProblemFlagValues v;
  v.dtype = dtype;
  v.kv_dtype = kv_dtype;
  v.out_dtype = out_dtype;
  v.batch = batch;
  v.heads = heads;
  v.heads_kv = heads_kv;
  v.seqlen = seqlen;
  v.seqlen_q = seqlen_q;
  v.seqlen_k = seqlen_k;
  v.hdim = hdim;
  v.hdim_v = hdim_v;
  v.mask = mask;
  v.attention_chunk = attention_chunk;
  v.causal = causal;
  v.softcap = softcap;
  v.scale = scale;
  v.page_size = page_size;
  v.cache_seqlens = cache_seqlens;
  v.varlen = varlen;
  v.seqlens_q = seqlens_q;
  v.seqlens_k = seqlens_k;
  for (const auto &[option, name] :
       {std::pair<const cl::Option *, const char *>{&batch, "--batch"}, {&seqlen, "--seqlen"},
        {&seqlen_q, "--seqlen-q"}, {&seqlen_k, "--seqlen-k"}})
    if (v.sizes_given.empty() && option->getNumOccurrences()) v.sizes_given = name;
  v.path = path;
  v.block_m = block_m;
  v.block_n = block_n;
  v.warps = warps;
  v.stages = stages;
  v.splits = splits;
  v.pack_gqa = pack_gqa;
  v.pass = pass;
  v.deterministic = deterministic;
  return v;
}

std::string ProblemOptions::first_given() const {
  const std::pair<const cl::Option *, const char *> flags[] = {
      {&dtype, "--dtype"},     {&kv_dtype, "--kv-dtype"}, {&out_dtype, "--out-dtype"},
      {&batch, "--batch"},       {&heads, "--heads"},
      {&heads_kv, "--heads-kv"}, {&seqlen, "--seqlen"},   {&seqlen_q, "--seqlen-q"},
      {&seqlen_k, "--seqlen-k"}, {&hdim, "--hdim"},       {&hdim_v, "--hdim-v"},
      {&mask, "--mask"},       {&attention_chunk, "--attention-chunk"},
      {&causal, "--causal"},   {&softcap, "--softcap"},
      {&scale, "--scale"},     {&page_size, "--page-size"}, {&cache_seqlens, "--cache-seqlens"},
      {&varlen, "--varlen"},   {&seqlens_q, "--seqlens-q"}, {&seqlens_k, "--seqlens-k"},
      {&pass, "--pass"},       {&deterministic, "--deterministic"}};
  for (const auto &[option, name] : flags)
    if (option->getNumOccurrences()) return name;
  return "";
}

CommonOptions::CommonOptions(cl::OptionCategory &category, const Subs &json_subs)
    : json("json", cl::desc("Print machine-readable JSON"), cl::cat(category), json_subs) {}

llvm::Expected<ResolvedKernel> resolve_kernel(const ProblemOptions &options,
                                              llvm::StringRef arch_flag, int &exit_code,
                                              bool modified) {
  exit_code = kExitUsage;
  auto parsed = parse_problem_flags(options.values());
  if (!parsed) return parsed.takeError();

  ResolvedKernel out;
  out.problem = parsed->problem;
  std::optional<DeviceInfo> device;
  if (auto info = query_device(0)) {
    device = std::move(*info);
  } else {
    out.device_note = llvm::toString(info.takeError());
  }

  TargetArch arch;
  if (!arch_flag.empty()) {
    auto parsed_arch = TargetArch::parse(arch_flag);
    if (!parsed_arch)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--arch: {0}", llvm::toString(parsed_arch.takeError())).str());
    arch = *parsed_arch;
  } else if (device) {
    arch = device->target();
  } else {
    exit_code = kExitFailure;
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        llvm::formatv("no GPU to target ({0}); pass --arch, e.g. --arch sm_90a", out.device_note)
            .str());
  }
  out.device_matches = device && device->target() == arch;
  // A device of the target knows its own opt-in limit; otherwise the
  // generator's table for the architecture decides.
  out.max_smem_bytes = out.device_matches ? device->max_smem_per_block_optin : 0;
  if (device && !out.device_matches)
    out.device_note = llvm::formatv("the GPU ({0}) is {1}, not {2}", device->name,
                                    device->target().name(), arch.name())
                          .str();

  const bool backward = parsed->pass == Pass::backward;
  // A packed batch's config is chosen as a call's is: by its longest
  // sequence and its total (class_view).
  const Problem chooser = class_view(out.problem, parsed->total_q);
  const KernelConfig config =
      backward ? default_backward_config(chooser, arch, out.max_smem_bytes, parsed->config,
                                         modified)
               : default_forward_config(chooser, arch, out.max_smem_bytes, parsed->config,
                                        /*sm_count=*/0, modified);
  auto spec = backward ? make_backward_spec(out.problem, config, arch, out.max_smem_bytes)
                       : make_forward_spec(out.problem, config, arch, out.max_smem_bytes, modified);
  if (!spec) return spec.takeError();
  out.spec = std::move(*spec);
  exit_code = kExitOk;
  return out;
}

void print_json(const llvm::json::Value &value) {
  llvm::outs() << llvm::formatv("{0:2}", value) << "\n";
}

llvm::json::Object problem_json(const Problem &p) {
  llvm::json::Object o;
  for_each_problem_field([&](const auto &field) { o[field.name] = field_json(p.*field.member); });
  // The scale the kernel uses, and the window's bounds only where they mean
  // something.
  o["softmax_scale"] = double(p.effective_scale());
  if (p.mask != MaskKind::window) {
    o.erase("window_left");
    o.erase("window_right");
  }
  return o;
}

// The fields a tuning stores, as `db` and `query` print a stored config.
llvm::json::Object accuracy_json(const AccuracyReport &r) {
  llvm::json::Object o{{"passed", r.passed},
                       {"max_err", r.max_err},
                       {"baseline_err", r.baseline_err},
                       {"tolerance", r.tolerance},
                       {"unwritten", int64_t(r.unwritten)},
                       {"lse_max_err", r.lse_max_err},
                       {"lse_unwritten", int64_t(r.lse_unwritten)}};
  if (r.rmse_checked) {
    o["rmse"] = r.rmse;
    o["rmse_bound"] = r.rmse_bound;
  }
  return o;
}

llvm::json::Object config_json(const KernelConfig &c) {
  llvm::json::Object o;
  for_each_kernel_config_field([&](const auto &field) {
    if (field.tuned) o[field.name] = field_json(c.*field.member);
  });
  return o;
}

}  // namespace flashjit::cli
