// KernelSpec -> the text NVRTC compiles: a short prelude of constants and type
// aliases, then `#include` of the kernel template. Templates travel as NVRTC
// in-memory headers (embedded at build time), so nothing is read from disk.
#pragma once

#include <string>
#include <vector>

#include "generator/kernel_spec.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

namespace flashjit {

struct TemplateFile {
  llvm::StringRef name;  // as #included, e.g. "common/mma.cuh"
  llvm::StringRef text;
};

// Every file under templates/, embedded by CMake.
llvm::ArrayRef<TemplateFile> embedded_templates();
// Hash of all templates and the generator version: part of every cache key.
std::string templates_hash();

struct GeneratedSource {
  std::string program_name;  // "<id>.cu", shown in NVRTC logs
  std::string entry;         // extern "C" name of the main kernel
  std::vector<std::string> entries;  // every kernel of the program, entry first
  std::string source;        // prelude + #include of the template
  std::vector<std::string> options;
  llvm::ArrayRef<TemplateFile> headers;

  // The source with every #include of a template replaced by its text, as a
  // file `nvcc` compiles offline.
  std::string expanded() const;
};

// A program of one template whose kernels take no spec (the GPU references,
// the block-mask builder): the policy types, `modifiers`' snippets (from the
// file's line 2, so NVRTC reports their own lines), then `header`;
// `entries` its kernels (the first is the entry). Options as given.
// `backward`: the program calls score_grad (modifiers_prelude).
GeneratedSource modified_program(const std::string &program_name, const std::string &header,
                                 std::vector<std::string> entries, const Modifiers &modifiers,
                                 std::vector<std::string> options, bool backward = false);

// The options every spec's program is compiled with (the architecture is
// added by the compiler stage, which knows the target).
std::vector<std::string> kernel_compile_options();

GeneratedSource generate_forward(const KernelSpec &spec);
// The backward program: flashjit_bwd_sm80 (entry), flashjit_bwd_preprocess,
// and flashjit_bwd_convert_dq — or, deterministic, flashjit_bwd_dq.
GeneratedSource generate_backward(const KernelSpec &spec);

}  // namespace flashjit
