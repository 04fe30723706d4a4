#include "tuner/cubin_reproduction.h"

#include "generator/kernel_id.h"
#include "reference/gpu_reference.h"
#include "reference/gpu_reference_backward.h"
#include "runtime/cubin_comparison.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/program_kernel.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SHA256.h"

namespace flashjit {

namespace {

llvm::Error cannot(const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), why.str());
}

std::string first_line(llvm::Error e) {
  return llvm::StringRef(llvm::toString(std::move(e))).split('\n').first.str();
}

// The programs that take no spec and are stored without modifiers, by name
// (program_id): the GPU references that precompile stores for the tuner.
// The block-mask builder always compiles a caller's mask_mod.
struct NamedProgram {
  const char *name;
  GeneratedSource (*generate)(const Modifiers &);
};
constexpr NamedProgram kNamedPrograms[] = {
    {"reference_attention", generate_reference_attention},
    {"reference_attention_backward", generate_reference_attention_backward},
};

std::string modifiers_missing(llvm::StringRef hash) {
  return llvm::formatv("it was compiled with a caller's modifiers (mod{0}), whose source the "
                       "database does not hold",
                       hash)
      .str();
}

}  // namespace

const char *to_string(Reproduction outcome) {
  switch (outcome) {
    case Reproduction::reproduced: return "reproduced";
    case Reproduction::differs: return "differs";
    case Reproduction::unverifiable: return "cannot verify";
  }
  return "?";
}

llvm::Expected<GeneratedSource> regenerate_program(const CubinRecord &row) {
  auto arch = TargetArch::parse(row.arch);
  if (!arch) return cannot("its arch: " + llvm::toString(arch.takeError()));
  // A program without a spec (program_id) ends with its modifiers' hash.
  const llvm::StringRef id = row.kernel_id;
  if (const size_t at = id.rfind("_mod"); at != llvm::StringRef::npos && id.size() == at + 20 &&
                                          llvm::all_of(id.drop_front(at + 4), llvm::isHexDigit))
    return cannot(modifiers_missing(id.drop_front(at + 4)));
  for (const NamedProgram &program : kNamedPrograms)
    if (id == program_id(program.name, *arch, {})) return program.generate({});
  auto parsed = parse_kernel_id(row.kernel_id);
  if (!parsed) return cannot(llvm::toString(parsed.takeError()));
  if (!parsed->modifiers_hash.empty()) return cannot(modifiers_missing(parsed->modifiers_hash));
  if (parsed->spec.arch != *arch)
    return cannot(llvm::formatv("its kernel id names {0}, its arch is {1}",
                                parsed->spec.arch.name(), row.arch));
  return parsed->spec.pass == Pass::backward ? generate_backward(parsed->spec)
                                             : generate_forward(parsed->spec);
}

ReproductionResult reproduce_cubin(const CubinRecord &row) {
  ReproductionResult out;
  auto unverifiable = [&](const llvm::Twine &why) {
    out.outcome = Reproduction::unverifiable;
    out.detail = why.str();
    return out;
  };
  // A row whose bytes are not the ones it was stored with is damaged:
  // get_cubin refuses it, but it still differs (and is still recompiled,
  // so that `db verify --repair` can replace it).
  auto digest = llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
      reinterpret_cast<const uint8_t *>(row.bytes.data()), row.bytes.size()));
  const bool corrupted =
      !llvm::StringRef(row.blob_sha256).equals_insensitive(llvm::toHex(digest, true));
  auto nvrtc = nvrtc_version();
  if (!nvrtc) return unverifiable("no NVRTC here to recompile it: " + first_line(nvrtc.takeError()));
  if (row.nvrtc_version != *nvrtc)
    return unverifiable(llvm::formatv("it was compiled by NVRTC {0}; this machine has NVRTC {1}, "
                                      "whose output differs (and whose calls never load it)",
                                      row.nvrtc_version, *nvrtc));
  auto source = regenerate_program(row);
  if (!source) return unverifiable(first_line(source.takeError()));
  auto arch = TargetArch::parse(row.arch);
  if (!arch) return unverifiable(first_line(arch.takeError()));  // regenerate checked it
  // The key binds the row to its program: a row this build would never
  // look up under this id is not vouched for by recompiling the id.
  const std::string key = cubin_key(*source, *arch, *nvrtc);
  if (key != row.key)
    return unverifiable(llvm::formatv(
        "this flashjit generates key {0} for its kernel id, not its key (a row of another "
        "flashjit or templates, or an edited one)",
        llvm::StringRef(key).take_front(16)));
  auto cubin = compile_to_cubin(*source, *arch);
  if (!cubin) return unverifiable("it does not compile here: " + first_line(cubin.takeError()));
  out.rebuilt = std::move(cubin->bytes);
  if (corrupted) {
    out.outcome = Reproduction::differs;
    out.detail = "its blob does not hash to its blob_sha256 (corrupted: calls refuse it)";
    return out;
  }
  const CubinComparison comparison = compare_cubins(row.bytes, out.rebuilt);
  out.outcome = comparison.same ? Reproduction::reproduced : Reproduction::differs;
  out.detail = comparison.identical ? "identical" : comparison.detail;
  return out;
}

}  // namespace flashjit
