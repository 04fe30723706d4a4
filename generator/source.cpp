#include "generator/source.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {

namespace {

const char *element_type(DType dtype) { return dtype == DType::bf16 ? "bf16" : "fp16"; }

const char *mask_policy(MaskKind mask) {
  switch (mask) {
    case MaskKind::none: return "NoMask";
    case MaskKind::causal: return "CausalMask";
    case MaskKind::window: return "WindowMask";
  }
  return "NoMask";
}

const TemplateFile *find_template(llvm::StringRef name) {
  for (const TemplateFile &file : embedded_templates())
    if (file.name == name) return &file;
  return nullptr;
}

// Inlines `#include "x"` lines that name an embedded template, once each.
void expand_into(llvm::StringRef text, llvm::raw_ostream &os, llvm::StringSet<> &seen) {
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    llvm::StringRef trimmed = line.trim();
    if (trimmed.consume_front("#include \"") && trimmed.consume_back("\"")) {
      if (const TemplateFile *file = find_template(trimmed)) {
        if (seen.insert(trimmed).second) {
          os << "// ---- " << trimmed << "\n";
          expand_into(file->text, os, seen);
        }
        continue;
      }
    }
    if (trimmed == "#pragma once") continue;
    os << line << '\n';
  }
}

}  // namespace

std::string GeneratedSource::expanded() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::StringSet<> seen;
  expand_into(source, os, seen);
  return os.str();
}

GeneratedSource generate_forward(const KernelSpec &spec) {
  const KernelConfig &c = spec.config;
  GeneratedSource out;
  out.program_name = spec.id() + ".cu";
  const bool sm90 = c.path == KernelPath::sm90;
  out.entry = sm90 ? "flashjit_fwd_sm90" : "flashjit_fwd_sm80";
  out.entries = {out.entry};
  out.headers = embedded_templates();
  out.source = llvm::formatv(
      R"(// flashjit forward kernel {0}
// templates {1}
#include "common/types.cuh"
#include "common/mask.cuh"

namespace flashjit {{
namespace cfg {{
constexpr int kHeadDimQK = {2};
constexpr int kHeadDimV = {3};
constexpr int kBlockM = {4};
constexpr int kBlockN = {5};
constexpr int kWarps = {6};
constexpr int kStages = {7};
constexpr bool kSoftcap = {8};
using Element = {9};
using Mask = {10};
}  // namespace cfg
}  // namespace flashjit

#include "{11}"
)",
      spec.id(), templates_hash().substr(0, 16), spec.head_dim_qk, spec.head_dim_v, c.block_m,
      c.block_n, c.warps, c.stages, spec.softcap ? "true" : "false", element_type(spec.dtype),
      mask_policy(spec.mask), sm90 ? "fwd_sm90.cuh" : "fwd_sm80.cuh");
  // The architecture is added by the compiler stage, which knows the target.
  out.options = {"-std=c++17", "-default-device",
                 "--extra-device-vectorization", "-lineinfo"};
  return out;
}

GeneratedSource generate_backward(const KernelSpec &spec) {
  const KernelConfig &c = spec.config;
  GeneratedSource out;
  out.program_name = spec.id() + ".cu";
  out.entry = "flashjit_bwd_sm80";
  out.entries = {out.entry, "flashjit_bwd_preprocess",
                 c.deterministic ? "flashjit_bwd_dq" : "flashjit_bwd_convert_dq"};
  out.headers = embedded_templates();
  out.source = llvm::formatv(
      R"(// flashjit backward kernels {0}
// templates {1}
#include "common/types.cuh"
#include "common/mask.cuh"

namespace flashjit {{
namespace cfg {{
constexpr int kHeadDimQK = {2};
constexpr int kHeadDimV = {3};
constexpr int kBlockM = {4};
constexpr int kBlockN = {5};
constexpr int kWarps = {6};
constexpr int kStages = {10};
constexpr bool kSoftcap = {7};
constexpr bool kDeterministic = {11};
using Element = {8};
using Mask = {9};
}  // namespace cfg
}  // namespace flashjit

#include "bwd_sm80.cuh"
{12})",
      spec.id(), templates_hash().substr(0, 16), spec.head_dim_qk, spec.head_dim_v, c.block_m,
      c.block_n, c.warps, spec.softcap ? "true" : "false", element_type(spec.dtype),
      mask_policy(spec.mask), c.stages, c.deterministic ? "true" : "false",
      c.deterministic ? "#include \"bwd_dq_sm80.cuh\"\n" : "");
  out.options = {"-std=c++17", "-default-device", "--extra-device-vectorization", "-lineinfo"};
  return out;
}

}  // namespace flashjit
