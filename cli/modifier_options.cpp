#include "cli/modifier_options.h"

#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "runtime/modifier_facts.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

ModifierOptions::ModifierOptions(cl::OptionCategory &category, cl::SubCommand &sub)
    : score_mod("score-mod",
                cl::desc("Compile FILE's score_mod(float score, int b, int h, int q, int k) "
                         "in, applied to every scaled score (either pass)"),
                cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      score_mod_grad("score-mod-grad",
                     cl::desc("Compile FILE's score_mod_grad(float score, int b, int h, int q, "
                              "int k), d score_mod / d score, in: the backward of a --score-mod "
                              "whose own file defines none"),
                     cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      mask_mod("mask-mod",
               cl::desc("Compile FILE's mask_mod(int b, int h, int q, int k) in (true: "
                        "visible), on top of the built-in mask (either pass)"),
               cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      aux("aux",
          cl::desc("The modifiers' extra inputs, e.g. \"const float* slopes, int prefix\": each "
                   "function then takes `const Aux& aux` last"),
          cl::value_desc("DECLS"), cl::cat(category), cl::sub(sub)),
      mask_mod_qk_only("mask-mod-qk-only",
                       cl::desc("The --mask-mod reads only q and k: one block map of the tiles "
                                "it hides or shows whole serves every batch and head (without "
                                "the flag flashjit finds out by compiling it; =false: a map "
                                "per batch and head)"),
                       cl::cat(category), cl::sub(sub)),
      sinks("sinks",
            cl::desc("Learned attention sinks (GPT-OSS): one logit per query head joins each "
                     "row's softmax; the backward also computes their gradient"),
            cl::cat(category), cl::sub(sub)) {}

llvm::Error ModifierOptions::apply(ResolvedKernel &kernel, int &code) const {
  auto modifiers = read(kernel.spec.pass);
  if (!modifiers) {
    code = kExitUsage;
    return modifiers.takeError();
  }
  if (modifiers->empty()) return llvm::Error::success();
  // As a call on the target compiles them (the block map's extent).
  auto resolved = resolve_modifiers(*modifiers, kernel.spec.pass, kernel.spec.arch);
  if (!resolved) {
    code = kExitFailure;
    return resolved.takeError();
  }
  kernel.spec.modifiers = std::move(*resolved);
  return llvm::Error::success();
}

bool ModifierOptions::given() const {
  return !score_mod.empty() || !score_mod_grad.empty() || !mask_mod.empty() || !aux.empty() ||
         mask_mod_qk_only.getNumOccurrences() > 0 || sinks;
}

llvm::Expected<Modifiers> ModifierOptions::read(Pass pass) const {
  Modifiers modifiers;
  if (!given()) return modifiers;
  for (const auto &[path, flag, out] :
       {std::tuple{&score_mod, "--score-mod", &modifiers.score_mod},
        std::tuple{&score_mod_grad, "--score-mod-grad", &modifiers.score_mod_grad},
        std::tuple{&mask_mod, "--mask-mod", &modifiers.mask_mod}}) {
    if (path->empty()) continue;
    auto file = llvm::MemoryBuffer::getFile(path->getValue());
    if (!file)
      return llvm::createStringError(
          file.getError(),
          llvm::formatv("{0} {1}: {2}", flag, path->getValue(), file.getError().message()).str());
    *out = (*file)->getBuffer().str();
    if (llvm::StringRef(*out).trim().empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("{0} {1}: the file is empty", flag, path->getValue()).str());
    // The snippets travel to compile workers as JSON strings, which hold
    // UTF-8 only (another encoding would be altered on the way, and its
    // kernel stored under another id than a call looks up).
    if (auto at = first_non_utf8_byte(*out))
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("{0} {1}: not UTF-8 text (byte {2}): save the file as UTF-8", flag,
                        path->getValue(), *at)
              .str());
  }
  auto fields = parse_aux_declarations(aux);
  if (!fields) return fields.takeError();
  modifiers.aux = std::move(*fields);
  modifiers.mask_mod_qk_only = mask_mod_qk_only.getNumOccurrences() == 0 ? MaskModQkOnly::automatic
                               : mask_mod_qk_only                        ? MaskModQkOnly::on
                                                                         : MaskModQkOnly::off;
  modifiers.sinks = sinks;
  if (llvm::Error e = validate_modifiers(modifiers)) return e;
  if (pass == Pass::backward && !modifiers.score_mod.empty()) {
    // The derivative: --score-mod-grad's, or the one the --score-mod file
    // defines (a probe compile finds it), never both.
    auto defined = score_mod_defines_grad(modifiers);
    if (!defined) return defined.takeError();
    if (*defined && !modifiers.score_mod_grad.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--score-mod-grad {0} and the score_mod_grad that --score-mod {1} "
                        "defines: give one of them",
                        score_mod_grad.getValue(), score_mod.getValue())
              .str());
    if (!*defined && modifiers.score_mod_grad.empty())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--pass bwd with --score-mod needs a score_mod_grad (d score_mod / d "
                        "score), which the backward scales by: define {0} in {1}, or give "
                        "--score-mod-grad FILE",
                        score_mod_grad_signature(modifiers), score_mod.getValue())
              .str());
  }
  return modifiers;
}

}  // namespace flashjit::cli

namespace flashjit::cli {

llvm::Expected<std::string> block_map_text(const Modifiers &modifiers, const TargetArch &arch,
                                           TuningDb *db) {
  if (modifiers.mask_mod.empty()) return std::string();
  switch (modifiers.mask_mod_qk_only) {
    case MaskModQkOnly::on:
      return std::string("one for every batch and head (--mask-mod-qk-only)");
    case MaskModQkOnly::off:
      return std::string("one per batch and head (--mask-mod-qk-only=false)");
    case MaskModQkOnly::automatic:
      break;
  }
  auto reads = mask_mod_reads(modifiers, arch, db);
  if (!reads) return reads.takeError();
  if (reads->qk_only())
    return llvm::formatv("one for every batch and head (mask_mod reads neither b nor h on {0})",
                         arch.name())
        .str();
  const char *which = reads->b && reads->h ? "b and h" : reads->b ? "b" : "h";
  return llvm::formatv("one per batch and head (mask_mod reads {0} on {1})", which, arch.name())
      .str();
}

}  // namespace flashjit::cli
