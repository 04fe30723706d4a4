#include "cli/modifier_options.h"

#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

ModifierOptions::ModifierOptions(cl::OptionCategory &category, cl::SubCommand &sub)
    : score_mod("score-mod",
                cl::desc("Compile FILE's score_mod(float score, int b, int h, int q, int k) "
                         "in, applied to every scaled score (either pass)"),
                cl::value_desc("FILE"), cl::cat(category), cl::sub(sub)),
      score_mod_grad("score-mod-grad",
                     cl::desc("Compile FILE's score_mod_grad(float score, int b, int h, int q, "
                              "int k), d score_mod / d score, in: the backward of a --score-mod"),
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
                                "it hides or shows whole serves every batch and head"),
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
  if (!modifiers->empty()) kernel.spec.modifiers = std::move(*modifiers);
  return llvm::Error::success();
}

bool ModifierOptions::given() const {
  return !score_mod.empty() || !score_mod_grad.empty() || !mask_mod.empty() || !aux.empty() ||
         mask_mod_qk_only || sinks;
}

llvm::Expected<Modifiers> ModifierOptions::read(Pass pass) const {
  Modifiers modifiers;
  if (score_mod.empty() && score_mod_grad.empty() && mask_mod.empty() && aux.empty() &&
      !mask_mod_qk_only && !sinks)
    return modifiers;
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
  modifiers.mask_mod_qk_only = mask_mod_qk_only;
  modifiers.sinks = sinks;
  if (llvm::Error e = validate_modifiers(modifiers)) return e;
  if (pass == Pass::backward && !modifiers.score_mod.empty() && modifiers.score_mod_grad.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "--pass bwd with --score-mod needs --score-mod-grad (d "
                                   "score_mod / d score): the backward scales by it");
  return modifiers;
}

}  // namespace flashjit::cli
