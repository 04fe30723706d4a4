// The backward's GPU reference (templates/reference_attention_backward.cuh)
// without a GPU: its program compiles with NVRTC for sm_80 and sm_90a, with
// and without a caller's modifiers, into three kernels that spill nothing;
// and the arguments it cannot serve are refused, naming why, before any
// GPU work. tests/gpu/reference_backward_gpu_test.cpp checks its numbers.
#include "reference/gpu_reference_backward.h"

#include <gtest/gtest.h>

#include <string>

#include "cli/ptxas_report.h"
#include "flashjit/mods.h"
#include "generator/modifier_source.h"
#include "llvm/Support/ThreadPool.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};
const char *const kEntries[] = {"flashjit_reference_attention_bwd_dq",
                                "flashjit_reference_attention_bwd_dkdv",
                                "flashjit_reference_attention_bwd_sinks"};

// Every kind of modifier at once: ALiBi (a score_mod with its
// score_mod_grad, reading aux.slopes), a mask_mod reading an aux scalar,
// and learned sinks.
Modifiers everything() {
  Modifiers m = mods::alibi();
  m.mask_mod =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return (k + b) % aux.period != 0;\n"
      "}\n";
  m.aux.push_back({"int", "period"});
  m.sinks = true;
  return m;
}

template <class T>
std::string error_of(llvm::Expected<T> value) {
  return value ? "" : llvm::toString(value.takeError());
}

// A small dense problem and packed arguments at addresses never read (every
// check below comes before the driver).
Problem small_problem() {
  Problem p;
  p.batch = 2;
  p.heads_q = 4;
  p.heads_kv = 2;
  p.seqlen_q = 77;
  p.seqlen_k = 133;
  p.head_dim_qk = p.head_dim_v = 64;
  return p;
}
BackwardArgs unread_args(const Problem &p) {
  const void *in = reinterpret_cast<const void *>(0x1000);
  void *out = reinterpret_cast<void *>(0x1000);
  return BackwardArgs::packed(p, in, in, in, in, in, reinterpret_cast<const float *>(0x1000), out,
                              out, out, out, backward_workspace_bytes(p));
}

TEST(ReferenceBackward, SourceNamesItsKernelsAndCompilesTheModifiersIn) {
  const GeneratedSource plain = generate_reference_attention_backward();
  EXPECT_EQ(plain.entry, kEntries[0]);
  ASSERT_EQ(plain.entries.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(plain.entries[i], kEntries[i]);
  EXPECT_NE(plain.source.find("using Modifiers = NoModifiers;"), std::string::npos);
  EXPECT_NE(plain.source.find("#include \"reference_attention_backward.cuh\""), std::string::npos);
  const Modifiers m = everything();
  const GeneratedSource modified = generate_reference_attention_backward(m);
  for (const char *piece :
       {"aux.slopes[h]", "aux.period", "#line 1 \"score_mod_grad\"",
        "static constexpr bool kSinks = true;",
        "return ::score_mod_grad(s, b, h, q, k, *static_cast<const ::Aux *>(aux));"})
    EXPECT_NE(modified.source.find(piece), std::string::npos) << piece;
  // Another derivative is another program.
  Modifiers other = m;
  other.score_mod_grad =
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return 2.f;\n}\n";
  EXPECT_NE(generate_reference_attention_backward(other).source, modified.source);
}

// Both architectures, plain and with every modifier: each of the three
// kernels is in the cubin, and ptxas reports no spill for any of them (so
// no local memory beyond what a kernel asks for).
TEST(ReferenceBackward, CompilesForSm80AndSm90aWithoutSpills) {
  const Modifiers variants[] = {Modifiers{}, everything()};
  struct Job {
    TargetArch arch;
    const Modifiers *modifiers;
    std::string failure;
  };
  std::vector<Job> jobs;
  for (const TargetArch &arch : {kSm80, kSm90a})
    for (const Modifiers &m : variants) jobs.push_back({arch, &m, ""});
  llvm::ThreadPool pool(llvm::hardware_concurrency());
  for (Job &job : jobs)
    pool.async([&job] {
      const std::string name =
          job.arch.name() + (job.modifiers->empty() ? "" : " with modifiers") + ": ";
      GeneratedSource source = generate_reference_attention_backward(*job.modifiers);
      source.options.push_back("--ptxas-options=-v");
      auto cubin = compile_to_cubin(source, job.arch);
      if (!cubin) {
        job.failure = name + llvm::toString(cubin.takeError());
        return;
      }
      const std::string bytes(cubin->bytes.begin(), cubin->bytes.end());
      for (const char *entry : kEntries) {
        if (bytes.find(entry) == std::string::npos) {
          job.failure += name + "no " + entry + " in the cubin\n";
          continue;
        }
        // NVRTC 13.0 has returned an empty log on the GPU machine for some
        // programs (tests/unit/sm90_compile_check.h): no report to read then.
        if (cubin->log.empty()) continue;
        const auto report = cli::parse_ptxas_report(cubin->log, entry);
        if (!report)
          job.failure += name + "no ptxas report of " + entry + " in:\n" + cubin->log;
        else if (report->spill_store_bytes || report->spill_load_bytes || report->stack_frame_bytes)
          job.failure += name + entry + " spills (" + std::to_string(report->spill_store_bytes) +
                         " bytes stored, stack frame " + std::to_string(report->stack_frame_bytes) +
                         "):\n" + cubin->log;
      }
    });
  pool.wait();
  for (const Job &job : jobs) EXPECT_EQ(job.failure, "");
}

TEST(ReferenceBackward, AVarlenProblemIsRefusedBeforeAnyGpuWork) {
  Problem p = small_problem();
  p.varlen = true;
  const std::string error =
      error_of(gpu_reference_attention_backward(p, unread_args(p), ReferencePrecision::exact));
  EXPECT_NE(error.find("GPU backward reference: a packed varlen batch is not supported"),
            std::string::npos)
      << error;
  p.varlen = false;
  p.page_size = 64;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, unread_args(p), ReferencePrecision::exact))
                .find("a KV cache (seqused_k, page_size) has no backward"),
            std::string::npos);
}

TEST(ReferenceBackward, NullInputsAreRefusedBeforeAnyGpuWork) {
  const Problem p = small_problem();
  for (int missing = 0; missing < 3; ++missing) {
    BackwardArgs args = unread_args(p);
    if (missing == 0) args.o = nullptr;
    if (missing == 1) args.dout = nullptr;
    if (missing == 2) args.lse = nullptr;
    const std::string error =
        error_of(gpu_reference_attention_backward(p, args, ReferencePrecision::element));
    EXPECT_NE(error.find("GPU backward reference: o, dout and lse must be device pointers"),
              std::string::npos)
        << missing << ": " << error;
  }
  // q, k and v: the forward reference's check.
  BackwardArgs args = unread_args(p);
  args.k = nullptr;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, args, ReferencePrecision::exact))
                .find("GPU reference: q, k and v must be device pointers"),
            std::string::npos);
}

TEST(ReferenceBackward, ModifierArgumentsAreCheckedAsTheBackwardChecksThem) {
  const Problem p = small_problem();
  // A score_mod without its derivative.
  Modifiers no_grad;
  no_grad.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k) { return s; }\n";
  BackwardArgs args = unread_args(p);
  args.modifiers = &no_grad;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, args, ReferencePrecision::exact))
                .find("the score_mod has no score_mod_grad"),
            std::string::npos);
  // The aux struct's size, and sinks asked for but not given.
  const Modifiers m = everything();
  args.modifiers = &m;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, args, ReferencePrecision::exact))
                .find("argument aux: 0 bytes at a null pointer, the modifiers' struct Aux takes "
                      "16"),
            std::string::npos);
  AuxValues aux(m);
  args.aux = aux.data();
  args.aux_bytes = aux.size();
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, args, ReferencePrecision::exact))
                .find("argument sinks: null, but the modifiers ask for learned sinks"),
            std::string::npos);
  // Aux without modifiers.
  BackwardArgs stray = unread_args(p);
  stray.aux = aux.data();
  stray.aux_bytes = aux.size();
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, stray, ReferencePrecision::exact))
                .find("argument aux: given without modifiers to read it"),
            std::string::npos);
}

TEST(ReferenceBackward, UnservedSizesAreRefusedBeforeAnyGpuWork) {
  Problem p = small_problem();
  p.head_dim_qk = 264;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, unread_args(p), ReferencePrecision::exact))
                .find("head dims must be in [1, 256], got qk=264 v=64"),
            std::string::npos);
  p = small_problem();
  p.heads_kv = 3;
  EXPECT_NE(error_of(gpu_reference_attention_backward(p, unread_args(p), ReferencePrecision::exact))
                .find("heads_q (4) must be a multiple of heads_kv (3)"),
            std::string::npos);
}

}  // namespace
}  // namespace flashjit
