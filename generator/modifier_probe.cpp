#include "generator/modifier_probe.h"

#include <algorithm>
#include <cctype>

#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {

namespace {

llvm::Error probe_error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "modifier probe: " + message);
}

bool identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Whether `text` names `symbol` as a whole token (param_1 is not param_10).
bool names(llvm::StringRef text, llvm::StringRef symbol) {
  for (size_t at = text.find(symbol); at != llvm::StringRef::npos; at = text.find(symbol, at + 1)) {
    const size_t end = at + symbol.size();
    if ((at == 0 || !identifier_char(text[at - 1])) &&
        (end == text.size() || !identifier_char(text[end])))
      return true;
  }
  return false;
}

// The probed part of the modifiers, then the probe's own lines.
GeneratedSource probe_program(const char *name, const Modifiers &probed, const std::string &probe,
                              const char *entry) {
  GeneratedSource source;
  source.program_name = name;
  source.entry = entry;
  if (*entry) source.entries = {entry};
  source.source = "#include \"common/modifiers.cuh\"\n" +
                  modifiers_prelude(probed, 2, source.program_name) + probe;
  source.options = kernel_compile_options();
  source.headers = embedded_templates();
  return source;
}

}  // namespace

Modifiers score_mod_grad_probed(const Modifiers &modifiers) {
  Modifiers probed;
  probed.score_mod = modifiers.score_mod;
  probed.aux = modifiers.aux;
  return probed;
}

Modifiers mask_mod_probed(const Modifiers &modifiers) {
  Modifiers probed;
  probed.mask_mod = modifiers.mask_mod;
  probed.aux = modifiers.aux;
  return probed;
}

GeneratedSource generate_score_mod_grad_probe(const Modifiers &modifiers) {
  const Modifiers probed = score_mod_grad_probed(modifiers);
  // The backward prelude's overload of last resort, and a declaration whose
  // return type is its call with the same argument expressions (lvalues of
  // the same types), so the variable holds which overload that call finds.
  const std::string probe =
      std::string(
          "template <class... A>\n"
          "__device__ __forceinline__ ::flashjit::NoScoreModGrad score_mod_grad(A...) "
          "{ return {}; }\n"
          "__device__ auto flashjit_probe_grad(float s, int b, int h, int q, int k, "
          "const void *aux)\n"
          "    -> decltype(::score_mod_grad(s, b, h, q, k") +
      (probed.aux.empty() ? "" : ", *static_cast<const ::Aux *>(aux)") +
      "));\n"
      "extern \"C\" __device__ int " +
      kGradProbeVariable +
      " =\n"
      "    ::flashjit::kIsScoreModGrad<decltype(flashjit_probe_grad(0.f, 0, 0, 0, 0, nullptr))> "
      "? 1 : 0;\n";
  return probe_program("score_mod_grad_probe.cu", probed, probe, "");
}

GeneratedSource generate_mask_mod_probe(const Modifiers &modifiers) {
  const Modifiers probed = mask_mod_probed(modifiers);
  const bool aux = !probed.aux.empty();
  // Every argument a parameter: nothing about b or h is known.
  const std::string probe = std::string("extern \"C\" __global__ void ") + kMaskProbeEntry +
                            "(int b, int h, int q, int k, " +
                            (aux ? "const ::Aux aux" : "const void *aux") +
                            ", bool *out) {\n"
                            "  *out = ::flashjit::cfg::Modifiers::visible(b, h, q, k, " +
                            (aux ? "&aux" : "aux") + ");\n}\n";
  return probe_program("mask_mod_probe.cu", probed, probe, kMaskProbeEntry);
}

llvm::Expected<bool> read_score_mod_grad_probe(llvm::StringRef ptx) {
  // ".visible .global .align 4 .u32 flashjit_probe_score_mod_grad = 1;",
  // or without an initialiser for 0.
  for (size_t at = ptx.find(kGradProbeVariable); at != llvm::StringRef::npos;
       at = ptx.find(kGradProbeVariable, at + 1)) {
    const size_t line_start = ptx.rfind('\n', at) + 1;  // npos + 1 is 0
    llvm::StringRef line = ptx.substr(line_start).take_until([](char c) { return c == '\n'; });
    if (!line.contains(".global")) continue;
    return line.split('=').second.trim().startswith("1");
  }
  return probe_error(llvm::formatv("the PTX does not define {0}", kGradProbeVariable).str());
}

llvm::Expected<MaskModReads> read_mask_mod_probe(llvm::StringRef ptx) {
  const std::string entry = std::string(".entry ") + kMaskProbeEntry + "(";
  const size_t at = ptx.find(entry);
  if (at == llvm::StringRef::npos)
    return probe_error(llvm::formatv("the PTX has no kernel {0}", kMaskProbeEntry).str());
  // The body: from the brace after the parameter list to the next entry or
  // function (or the text's end).
  const size_t open = ptx.find('{', at);
  if (open == llvm::StringRef::npos)
    return probe_error(llvm::formatv("the PTX of {0} has no body", kMaskProbeEntry).str());
  llvm::StringRef body = ptx.substr(open);
  body = body.take_front(std::min(body.find(".entry "), body.find(".func ")));
  const std::string param = std::string(kMaskProbeEntry) + "_param_";
  MaskModReads reads;
  reads.b = names(body, param + "0");
  reads.h = names(body, param + "1");
  return reads;
}

}  // namespace flashjit
