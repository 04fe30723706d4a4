#include "generator/source.h"

#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "generator/backward_steps.h"
#include "generator/modifier_source.h"
#include "generator/warp_roles.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {

namespace {

const char *element_type(DType dtype) {
  switch (dtype) {
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::e4m3: return "e4m3";
  }
  return "bf16";
}

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

// The generated translation unit: a header naming the kernel, the config as
// constants in flashjit::cfg (kDeterministic only where `deterministic` is
// set), then the kernel templates.
std::string write_source(llvm::StringRef what, const KernelSpec &spec,
                         std::optional<bool> deterministic,
                         llvm::ArrayRef<llvm::StringRef> kernel_headers) {
  const KernelConfig &c = spec.config;
  const char *softcap = spec.softcap ? "true" : "false";
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "// flashjit " << what << " " << spec.id() << "\n"
     << "// templates " << templates_hash().substr(0, 16) << "\n"
     << "#include \"common/types.cuh\"\n"
     << "#include \"common/score_policy.cuh\"\n"
     << "\n"
     << "namespace flashjit {\n"
     << "namespace cfg {\n"
     << "constexpr int kHeadDimQK = " << spec.head_dim_qk << ";\n"
     << "constexpr int kHeadDimV = " << spec.head_dim_v << ";\n"
     << "constexpr int kBlockM = " << c.block_m << ";\n"
     << "constexpr int kBlockN = " << c.block_n << ";\n"
     << "constexpr int kWarps = " << c.warps << ";\n"
     << "constexpr int kStages = " << c.stages << ";\n"
     << "constexpr bool kSoftcap = " << softcap << ";\n";
  if (deterministic)
    os << "constexpr bool kDeterministic = " << (*deterministic ? "true" : "false") << ";\n";
  if (spec.pass == Pass::forward)
    os << "constexpr int kPackGqa = " << spec.pack_gqa << ";\n"
       << "constexpr bool kSplitKv = " << (spec.split_kv ? "true" : "false") << ";\n"
       << "constexpr int kPageSize = " << spec.page_size << ";\n"
       << "constexpr bool kVInK = " << (spec.v_in_k ? "true" : "false") << ";\n";
  // Both passes' kernels read sequences through common/sequence.cuh.
  os << "constexpr bool kSeqUsedK = " << (spec.seqused_k ? "true" : "false") << ";\n"
     << "constexpr bool kVarlen = " << (spec.varlen ? "true" : "false") << ";\n";
  if (std::optional<WarpRoleRegisters> roles = warp_role_registers(spec))
    os << "constexpr int kProducerRegisters = " << roles->producer << ";\n"
       << "constexpr int kConsumerRegisters = " << roles->consumer << ";\n";
  // Element: K's and V's, and what the GEMMs read; QElement: the caller's Q
  // (16-bit under an e4m3 cache, quantized in the kernel); OutElement: O's
  // (bf16 or fp16 under e4m3 inputs).
  os << "using Element = " << element_type(spec.kv_dtype) << ";\n"
     << "using QElement = " << element_type(spec.dtype) << ";\n"
     << "using OutElement = " << element_type(spec.out_dtype) << ";\n"
     << "using Mask = " << (spec.chunked ? "ChunkedMask<" : "") << mask_policy(spec.mask)
     << (spec.chunked ? ">" : "") << ";\n"
     << "}  // namespace cfg\n"
     << "}  // namespace flashjit\n";
  // The caller's modifiers (compiled_modifiers: the forward's without
  // score_mod_grad), numbered from the line they start on.
  os.flush();
  int line = 1;
  for (char c : out) line += c == '\n';
  os << modifiers_prelude(spec.compiled_modifiers(), line, spec.id() + ".cu",
                          spec.pass == Pass::backward)
     // What happens to a score, for every kernel (common/score_policy.cuh).
     << "namespace flashjit::cfg { using Score = ScorePolicy<Mask, kSoftcap, Modifiers>; }\n\n";
  for (llvm::StringRef header : kernel_headers) os << "#include \"" << header << "\"\n";
  return os.str();
}

}  // namespace

std::vector<std::string> kernel_compile_options() {
  return {"-std=c++17", "-default-device", "--extra-device-vectorization", "-lineinfo"};
}

GeneratedSource modified_program(const std::string &program_name, const std::string &header,
                                 std::vector<std::string> entries, const Modifiers &modifiers,
                                 std::vector<std::string> options, bool backward) {
  GeneratedSource out;
  out.program_name = program_name;
  out.entry = entries.front();
  out.entries = std::move(entries);
  out.source = "#include \"common/modifiers.cuh\"\n" +
               modifiers_prelude(modifiers, 2, out.program_name, backward) + "#include \"" +
               header + "\"\n";
  out.options = std::move(options);
  out.headers = embedded_templates();
  return out;
}

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
  const char *kernel = sm90 ? "fwd_sm90.cuh" : "fwd_sm80.cuh";
  std::vector<llvm::StringRef> headers = {kernel};
  if (spec.split_kv) {
    // The combine kernel merges the splits' partials (generator/kernel_spec.h).
    out.entries.push_back("flashjit_fwd_combine");
    headers.push_back("fwd_combine.cuh");
  }
  if (sm90 && !spec.modifiers.mask_mod.empty()) {
    // The block map of the caller's mask_mod, built before each call
    // (fwd_block_map.cuh).
    out.entries.push_back("flashjit_fwd_block_kinds");
    out.entries.push_back("flashjit_fwd_block_list");
    out.entries.push_back("flashjit_fwd_block_runs");
    out.entries.push_back("flashjit_block_mask_grid");
    headers.push_back("fwd_block_map.cuh");
  }
  if (sm90 && spec.varlen) {
    // The order of a packed batch's sequences for persistent CTAs,
    // computed before each call (fwd_sequence_order.cuh).
    out.entries.push_back("flashjit_fwd_sequence_order");
    headers.push_back("fwd_sequence_order.cuh");
  }
  if (appends_keys(spec)) {
    // A KV cache's append of this step's keys and values (kv_append.cuh).
    out.entries.push_back("flashjit_kv_append");
    headers.push_back("kv_append.cuh");
  }
  out.source = write_source(headers.size() > 1 ? "forward kernels" : "forward kernel", spec,
                            std::nullopt, headers);
  out.options = kernel_compile_options();
  return out;
}

GeneratedSource generate_backward(const KernelSpec &spec) {
  const KernelConfig &c = spec.config;
  GeneratedSource out;
  out.program_name = spec.id() + ".cu";
  const bool sm90 = c.path == KernelPath::sm90;
  out.entry = sm90 ? "flashjit_bwd_sm90" : "flashjit_bwd_sm80";
  // The entries backward_steps launches, the main kernel first.
  out.entries = {out.entry};
  for (const BackwardStep &step : backward_steps(spec))
    if (step.entry != out.entry) out.entries.push_back(step.entry);
  out.headers = embedded_templates();
  if (sm90 && !spec.modifiers.mask_mod.empty()) {
    // The block map of the caller's mask_mod, built before each call
    // (bwd_block_map.cuh).
    out.entries.push_back("flashjit_bwd_block_kinds");
    out.entries.push_back("flashjit_bwd_block_list");
    out.entries.push_back("flashjit_block_mask_grid");
    out.source = write_source("backward kernels", spec, c.deterministic,
                              {"bwd_sm90.cuh", "bwd_block_map.cuh"});
  } else if (sm90)
    out.source = write_source("backward kernels", spec, c.deterministic, {"bwd_sm90.cuh"});
  else if (c.deterministic)
    out.source = write_source("backward kernels", spec, true, {"bwd_sm80.cuh", "bwd_dq_sm80.cuh"});
  else
    out.source = write_source("backward kernels", spec, false, {"bwd_sm80.cuh"});
  out.options = kernel_compile_options();
  return out;
}

}  // namespace flashjit
