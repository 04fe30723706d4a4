// libFuzzer target: the CLI's problem and kernel-config flags
// (cli::parse_problem_flags). The input is the flags' text: a first byte
// whose bits are the boolean flags (1: --causal, 2: --deterministic, 4:
// --cache-seqlens, 8: --varlen), then the string fields in declaration order
// (but --splits, --pack-gqa, --page-size, --seqlens-q, --seqlens-k and the
// sizes-given marker last, in the order they were added, so that the seed
// corpus keeps its meaning), separated by '\n'; fields the input does not
// reach keep their defaults. Any text must give a validated
// problem or one "--flag: ..." error (or validate_problem's); never a crash,
// an ASan or UBSan report (a signed overflow in a bound, a float cast out of
// range).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cli/problem_flags.h"
#include "generator/kernel_spec.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  flashjit::cli::ProblemFlagValues v;
  if (size > 0) {
    v.causal = data[0] & 1;
    v.deterministic = data[0] & 2;
    v.cache_seqlens = data[0] & 4;
    v.varlen = data[0] & 8;
  }
  std::string *const fields[] = {&v.dtype,   &v.batch,   &v.heads,  &v.heads_kv, &v.seqlen,
                                 &v.seqlen_q, &v.seqlen_k, &v.hdim,   &v.hdim_v,   &v.mask,
                                 &v.softcap, &v.scale,   &v.path,   &v.block_m,  &v.block_n,
                                 &v.warps,   &v.stages,  &v.pass,   &v.splits,   &v.pack_gqa,
                                 &v.page_size, &v.seqlens_q, &v.seqlens_k, &v.sizes_given};
  llvm::StringRef rest = size > 0 ? llvm::StringRef(reinterpret_cast<const char *>(data) + 1,
                                                    size - 1)
                                  : llvm::StringRef();
  for (std::string *field : fields) {
    if (rest.empty()) break;
    auto [piece, tail] = rest.split('\n');
    *field = piece.str();
    rest = tail;
  }

  llvm::Expected<flashjit::cli::ParsedProblem> parsed = flashjit::cli::parse_problem_flags(v);
  if (!parsed) {
    const std::string message = llvm::toString(parsed.takeError());
    if (message.empty()) std::abort();
    return 0;
  }
  // What the flags accept, the generator accepts.
  if (llvm::Error e = flashjit::validate_problem(parsed->problem)) {
    llvm::consumeError(std::move(e));
    std::abort();
  }
  return 0;
}
