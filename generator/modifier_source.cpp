#include "generator/modifier_source.h"

#include <cctype>
#include <cstdint>
#include <set>

#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {

namespace {

struct AuxType {
  const char *name;
  int size;  // and alignment
};
constexpr AuxType kAuxTypes[] = {
    {"const float*", 8}, {"const int*", 8}, {"const long long*", 8}, {"const unsigned char*", 8},
    {"float", 4},        {"int", 4},        {"long long", 8}};

const AuxType *find_type(const std::string &name) {
  for (const AuxType &t : kAuxTypes)
    if (name == t.name) return &t;
  return nullptr;
}

bool is_identifier(const std::string &s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

llvm::Error modifier_error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), "modifiers: " + message);
}

std::string type_list() {
  std::string out;
  for (const AuxType &t : kAuxTypes) out += std::string(out.empty() ? "" : ", ") + t.name;
  return out;
}

// FNV-1a, 64 bits: the same in every process and build (std::hash and
// llvm::hash_value promise neither).
uint64_t fnv1a(uint64_t h, const std::string &s) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return (h ^ 0xffu) * 1099511628211ull;  // a separator, so "ab"+"c" differs from "a"+"bc"
}

}  // namespace

llvm::Expected<std::vector<AuxSlot>> aux_layout(const Modifiers &modifiers) {
  std::vector<AuxSlot> slots;
  std::set<std::string> names;
  int offset = 0;
  for (const AuxField &field : modifiers.aux) {
    const AuxType *type = find_type(field.type);
    if (!type)
      return modifier_error(llvm::formatv("aux field '{0}' has type '{1}': expected one of {2}",
                                          field.name, field.type, type_list())
                                .str());
    if (!is_identifier(field.name))
      return modifier_error(
          llvm::formatv("aux field name '{0}' is not a C identifier", field.name).str());
    if (!names.insert(field.name).second)
      return modifier_error(llvm::formatv("aux field '{0}' is declared twice", field.name).str());
    offset = (offset + type->size - 1) / type->size * type->size;
    slots.push_back({offset, type->size});
    offset += type->size;
  }
  if (offset > kAuxBytes)
    return modifier_error(
        llvm::formatv("the aux fields take {0} bytes as a struct: at most {1}", offset, kAuxBytes)
            .str());
  return slots;
}

int aux_struct_bytes(const std::vector<AuxSlot> &slots) {
  int end = 0, align = 1;
  for (const AuxSlot &slot : slots) {
    end = slot.offset + slot.size;
    align = slot.size > align ? slot.size : align;
  }
  return (end + align - 1) / align * align;
}

llvm::Error validate_modifier_functions(const Modifiers &modifiers) {
  if (!modifiers.aux.empty() && modifiers.empty())
    return modifier_error("aux fields are declared but there is no score_mod or mask_mod");
  if (!modifiers.score_mod_grad.empty() && modifiers.score_mod.empty())
    return modifier_error("score_mod_grad is given but there is no score_mod it is the "
                          "derivative of");
  if (modifiers.mask_mod_qk_only == MaskModQkOnly::on && modifiers.mask_mod.empty())
    return modifier_error("mask_mod_qk_only is set but there is no mask_mod it could describe");
  return llvm::Error::success();
}

llvm::Error validate_modifiers(const Modifiers &modifiers) {
  if (llvm::Error e = validate_modifier_functions(modifiers)) return e;
  auto layout = aux_layout(modifiers);
  return layout ? llvm::Error::success() : layout.takeError();
}

std::optional<size_t> first_non_utf8_byte(llvm::StringRef text) {
  const auto *begin = reinterpret_cast<const llvm::UTF8 *>(text.data());
  const llvm::UTF8 *at = begin;
  if (llvm::isLegalUTF8String(&at, begin + text.size())) return std::nullopt;
  return static_cast<size_t>(at - begin);
}

uint64_t modifiers_hash_value(const Modifiers &modifiers) {
  if (modifiers.empty()) return 0;
  uint64_t h = 14695981039346656037ull;
  h = fnv1a(h, modifiers.score_mod);
  h = fnv1a(h, modifiers.mask_mod);
  for (const AuxField &field : modifiers.aux) h = fnv1a(fnv1a(h, field.type), field.name);
  // The block map's extent is compiled in: a shared map is another kernel.
  // `automatic` compiles as `off` until a call resolves it
  // (runtime/modifier_facts.h), so the two name one kernel.
  if (modifiers.mask_mod_qk_only == MaskModQkOnly::on) h = fnv1a(h, "qk_only");
  if (!modifiers.score_mod_grad.empty()) h = fnv1a(fnv1a(h, "grad"), modifiers.score_mod_grad);
  if (modifiers.sinks) h = fnv1a(h, "sinks");
  return h;
}

std::string modifiers_hash(const Modifiers &modifiers) {
  if (modifiers.empty()) return "";
  return llvm::formatv("{0:x-16}", modifiers_hash_value(modifiers)).str();
}

std::string modifiers_prelude(const Modifiers &modifiers, int first_line,
                              const std::string &program, bool backward) {
  if (modifiers.empty()) return "namespace flashjit::cfg { using Modifiers = NoModifiers; }\n";
  std::string out;
  llvm::raw_string_ostream os(out);
  const bool aux = !modifiers.aux.empty();
  os << "// The caller's modifiers (include/flashjit/modifiers.h).\n";
  if (aux) {
    os << "struct Aux {\n";
    for (const AuxField &field : modifiers.aux)
      os << "  " << field.type << " " << field.name << ";\n";
    os << "};\n";
  }
  auto snippet = [&](const char *name, const std::string &text) {
    if (text.empty()) return;
    os << "#line 1 \"" << name << "\"\n" << text;
    if (text.back() != '\n') os << '\n';
  };
  snippet("score_mod", modifiers.score_mod);
  snippet("score_mod_grad", modifiers.score_mod_grad);
  snippet("mask_mod", modifiers.mask_mod);
  os.flush();
  int lines = 0;  // the prelude's lines so far
  for (char c : out) lines += c == '\n';
  // Back to the generated file's numbering: this directive is line
  // first_line + lines, so the next is one more.
  os << "#line " << first_line + lines + 1 << " \"" << program << "\"\n";
  const char *aux_arg = aux ? ", *static_cast<const ::Aux *>(aux)" : "";
  const bool score = !modifiers.score_mod.empty();
  // score_mod_slope: where the score_mod snippet defines one, the sm90
  // forward adds slope * (k - q) itself (fwd_sm90.cuh, modify); where it
  // does not, this overload of last resort is the one a call finds.
  if (score)
    os << "template <class... A>\n"
       << "__device__ __forceinline__ ::flashjit::NoScoreSlope score_mod_slope(A...) { return {}; "
          "}\n";
  // A backward's score_mod_grad where none is given apart: the score_mod
  // snippet's own, found the same way; this overload of last resort is
  // what a snippet without one leaves, and score_grad's static_assert
  // names it (the host refuses such a call first: modifier_grad_error).
  const bool grad_in_snippet = backward && score && modifiers.score_mod_grad.empty();
  if (grad_in_snippet)
    os << "template <class... A>\n"
       << "__device__ __forceinline__ ::flashjit::NoScoreModGrad score_mod_grad(A...) { return "
          "{}; }\n";
  // One of the policy's two functions: the caller's, or the identity.
  auto function = [&](const char *head, const std::string &snippet, const char *call,
                      const char *identity) {
    os << "  __device__ __forceinline__ static " << head << " {\n    return "
       << (snippet.empty() ? std::string(identity) : std::string(call) + aux_arg + ")")
       << ";\n  }\n";
  };
  os << "namespace flashjit {\nnamespace cfg {\n"
     << "struct Modifiers {\n"
     << "  static constexpr bool kScore = " << (modifiers.score_mod.empty() ? "false" : "true")
     << ";\n"
     << "  static constexpr bool kMask = " << (modifiers.mask_mod.empty() ? "false" : "true")
     << ";\n"
     << "  static constexpr bool kMaskQkOnly = "
     << (modifiers.mask_mod_qk_only == MaskModQkOnly::on && !modifiers.mask_mod.empty() ? "true"
                                                                                        : "false")
     << ";\n"
     << "  static constexpr bool kSinks = " << (modifiers.sinks ? "true" : "false") << ";\n";
  function("float score(float s, int b, int h, int q, int k, const void *aux)", modifiers.score_mod,
           "::score_mod(s, b, h, q, k", "s");
  os << "  static constexpr bool kScoreSlope = ";
  if (score)
    os << "::flashjit::kIsScoreSlope<decltype(::score_mod_slope(0, 0"
       << (aux ? ", *static_cast<const ::Aux *>(nullptr)" : "") << "))>;\n";
  else
    os << "false;\n";
  os << "  __device__ __forceinline__ static float score_slope(int b, int h, const void *aux) {\n"
     << "    return " << (score ? std::string("::score_mod_slope(b, h") + aux_arg + ")" : "0.f")
     << ";\n  }\n";
  function("bool visible(int b, int h, int q, int k, const void *aux)", modifiers.mask_mod,
           "::mask_mod(b, h, q, k", "true");
  if (grad_in_snippet) {
    const std::string call = std::string("::score_mod_grad(s, b, h, q, k") + aux_arg + ")";
    os << "  __device__ __forceinline__ static float score_grad(float s, int b, int h, int q, "
          "int k, const void *aux) {\n"
       << "    static_assert(::flashjit::kIsScoreModGrad<decltype(" << call << ")>,\n"
       << "                  \"" << score_mod_grad_missing(modifiers) << "\");\n"
       << "    return " << call << ";\n  }\n";
  } else {
    function("float score_grad(float s, int b, int h, int q, int k, const void *aux)",
             modifiers.score_mod_grad, "::score_mod_grad(s, b, h, q, k", "1.f");
  }
  os << "};\n}  // namespace cfg\n}  // namespace flashjit\n";
  return os.str();
}

std::string score_mod_grad_signature(const Modifiers &modifiers) {
  return std::string("float score_mod_grad(float score, int b, int h, int q, int k") +
         (modifiers.aux.empty() ? ")" : ", const Aux &aux)");
}

std::string score_mod_grad_missing(const Modifiers &modifiers) {
  return "the score_mod has no score_mod_grad, d score_mod / d score, which the backward needs: "
         "define " +
         score_mod_grad_signature(modifiers) +
         " in the score_mod's source (or give it apart), or run the forward alone";
}

llvm::Expected<std::vector<AuxField>> parse_aux_declarations(llvm::StringRef text) {
  std::vector<AuxField> fields;
  if (text.trim().empty()) return fields;
  llvm::SmallVector<llvm::StringRef, 8> decls;
  text.split(decls, ',');
  for (llvm::StringRef decl : decls) {
    // The name is the last word; the type, everything before it, with "T *"
    // spelled "T*".
    decl = decl.trim();
    const size_t cut = decl.find_last_of(" \t*");
    if (cut == llvm::StringRef::npos || cut + 1 >= decl.size())
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("--aux: '{0}' is not a declaration TYPE NAME (e.g. 'const float* "
                        "slopes')",
                        decl)
              .str());
    std::string type;
    for (char c : decl.take_front(cut + 1).trim()) {
      if (c == '*') {
        while (!type.empty() && type.back() == ' ') type.pop_back();
      } else if (c == ' ' || c == '\t') {
        if (!type.empty() && type.back() == ' ') continue;
        c = ' ';
      }
      type += c;
    }
    fields.push_back({type, decl.drop_front(cut + 1).str()});
  }
  return fields;
}

}  // namespace flashjit
