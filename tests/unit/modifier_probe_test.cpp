// The probes of a caller's modifiers (generator/modifier_probe.h,
// runtime/modifier_facts.h), without a GPU: which of b and h a compiled
// mask_mod reads, whether a score_mod snippet defines its own
// score_mod_grad, that each probe compiles once per process, and the
// modifiers a pass compiles as they decide them.
#include "generator/modifier_probe.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "cache/tuning_db.h"
#include "flashjit/mods.h"
#include "generator/modifier_source.h"
#include "generator/source.h"
#include "runtime/modifier_facts.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "runtime/runtime_counters.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

std::string error_of(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

Modifiers mask(const std::string &text, std::vector<AuxField> aux = {}) {
  Modifiers m;
  m.mask_mod = text;
  m.aux = std::move(aux);
  return m;
}

MaskModReads reads_of(const Modifiers &m, const TargetArch &arch) {
  auto reads = mask_mod_reads(m, arch);
  EXPECT_TRUE(bool(reads)) << (reads ? "" : llvm::toString(reads.takeError()));
  return reads ? *reads : MaskModReads{true, true};
}

// What the compiled code reads, not what the text names: b and h as
// kernel parameters the compiler knows nothing of, on both targets.
TEST(ModifierProbe, FindsWhichOfBAndHTheCompiledMaskReads) {
  const std::vector<AuxField> doc_ids = {{"const int*", "doc_ids"}, {"int", "seqlen"}};
  const struct {
    const char *name;
    Modifiers modifiers;
    MaskModReads expected;
  } cases[] = {
      // Documents per sequence, causal: an aux array indexed by b reads b.
      {"document-causal by b",
       mask("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  const long long row = static_cast<long long>(b) * aux.seqlen;\n"
            "  return k <= q && aux.doc_ids[row + q] == aux.doc_ids[row + k];\n}\n",
            doc_ids),
       {true, false}},
      {"shipped document_mask", mods::document_mask(), {true, false}},
      {"causal",
       mask("__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; }\n"),
       {false, false}},
      {"prefix-LM",
       mask("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return k < aux.prefix || k <= q;\n}\n",
            {{"int", "prefix"}}),
       {false, false}},
      {"window with sinks", mods::sliding_window_with_sinks(), {false, false}},
      // One set of documents for every sequence: q and k alone.
      {"shared documents",
       mask("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return aux.doc_ids[q] == aux.doc_ids[k];\n}\n",
            {{"const int*", "doc_ids"}}),
       {false, false}},
      {"a window per head",
       mask("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return k <= q && q - k < aux.windows[h];\n}\n",
            {{"const int*", "windows"}}),
       {false, true}},
      {"even heads see everything",
       mask("__device__ bool mask_mod(int b, int h, int q, int k) {\n"
            "  return h % 2 == 0 || k <= q;\n}\n"),
       {false, true}},
      // Named in the text, folded away by the compiler.
      {"b * 0",
       mask("__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
            "  return aux.doc_ids[b * 0 + q] == aux.doc_ids[k + h * 0];\n}\n",
            {{"const int*", "doc_ids"}}),
       {false, false}},
      {"both",
       mask("__device__ bool mask_mod(int b, int h, int q, int k) {\n"
            "  return (b + h + q) % 3 != k % 3;\n}\n"),
       {true, true}},
  };
  for (const auto &c : cases)
    for (const TargetArch &arch : {kSm90a, kSm80})
      EXPECT_EQ(reads_of(c.modifiers, arch), c.expected) << c.name << " on " << arch.name();
  EXPECT_EQ(reads_of(Modifiers{}, kSm90a), MaskModReads{});
}

// The derivative in the score_mod's own snippet, found by the overload
// resolution a backward kernel's call does: only with the parameters the
// kernels pass (aux last where there are aux fields).
TEST(ModifierProbe, FindsTheScoreModGradInTheScoreModSnippet) {
  const std::string alibi =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return score + aux.slopes[h] * (k - q);\n}\n";
  const std::string grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) "
      "{\n  return 1.f;\n}\n";
  const std::string wrong =
      "__device__ float score_mod_grad(float score, int b, int h, int q, "
      "int k) { return 1.f; }\n";
  const std::string halved =
      "__device__ float score_mod(float s, int b, int h, int q, int k) { return 0.5f * s; }\n"
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k) { return 0.5f; }\n";
  const struct {
    const char *name;
    std::string score_mod;
    bool aux, expected;
  } cases[] = {{"alibi with its derivative", alibi + grad, true, true},
               {"alibi without", alibi, true, false},
               {"without the aux parameter", alibi + wrong, true, false},
               {"no aux", halved, false, true}};
  for (const auto &c : cases) {
    Modifiers m;
    m.score_mod = c.score_mod;
    if (c.aux) m.aux = {{"const float*", "slopes"}};
    auto defined = score_mod_defines_grad(m);
    ASSERT_TRUE(bool(defined)) << c.name << ": " << llvm::toString(defined.takeError());
    EXPECT_EQ(*defined, c.expected) << c.name;
  }
  auto none = score_mod_defines_grad(Modifiers{});
  ASSERT_TRUE(bool(none));
  EXPECT_FALSE(*none);
}

// A probe compiles once per process per probed text (and target); a call
// that needs none compiles none.
TEST(ModifierProbe, EachProbeCompilesOnce) {
  // A text no other test probes.
  const Modifiers m =
      mask("__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q + 7; } // once\n");
  const uint64_t probes = modifier_probe_compiles();
  const uint64_t compiles = runtime_counters().compiles.load();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(reads_of(m, kSm90a), MaskModReads{});
  const double first_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(modifier_probe_compiles(), probes + 1);
  EXPECT_EQ(runtime_counters().compiles.load(), compiles + 1);
  const auto again = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) EXPECT_EQ(reads_of(m, kSm90a), MaskModReads{});
  const double cached_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - again).count() /
      100;
  EXPECT_EQ(modifier_probe_compiles(), probes + 1);
  EXPECT_EQ(runtime_counters().compiles.load(), compiles + 1);
  std::printf("MASK_PROBE first call %.1f ms (NVRTC to PTX for sm_90a), cached %.2f us\n", first_ms,
              cached_us);
  // Another target is another probe; the explicit flag and another pass's
  // part of the modifiers need none.
  EXPECT_EQ(reads_of(m, kSm80), MaskModReads{});
  EXPECT_EQ(modifier_probe_compiles(), probes + 2);
  Modifiers declared = m;
  declared.mask_mod += "// declared\n";
  for (MaskModQkOnly given : {MaskModQkOnly::on, MaskModQkOnly::off}) {
    declared.mask_mod_qk_only = given;
    auto resolved = resolve_modifiers(declared, Pass::forward, kSm90a);
    ASSERT_TRUE(bool(resolved)) << llvm::toString(resolved.takeError());
    EXPECT_EQ(resolved->mask_mod_qk_only, given);
  }
  Modifiers score_only;
  score_only.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k) { return s; } // fwd\n";
  auto forward = resolve_modifiers(score_only, Pass::forward, kSm90a);
  ASSERT_TRUE(bool(forward));
  EXPECT_EQ(*forward, score_only);
  EXPECT_EQ(modifier_probe_compiles(), probes + 2);

  // The score_mod_grad probe: once for the snippet, whatever the target.
  Modifiers halved;
  halved.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k) { return 0.5f * s; }\n"
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k) { return 0.5f; }\n"
      "// once\n";
  const auto grad_start = std::chrono::steady_clock::now();
  EXPECT_EQ(error_of(check_score_mod_grad(halved)), "");
  const double grad_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - grad_start)
          .count();
  std::printf("GRAD_PROBE first call %.1f ms (NVRTC to PTX for sm_80)\n", grad_ms);
  for (const TargetArch &arch : {kSm90a, kSm80}) {
    auto backward = resolve_modifiers(halved, Pass::backward, arch);
    ASSERT_TRUE(bool(backward)) << llvm::toString(backward.takeError());
    EXPECT_EQ(*backward, halved);
  }
  EXPECT_EQ(modifier_probe_compiles(), probes + 3);
}

// A finding is kept in the tuning database it was probed with, and read
// from one before any probe: a process served from a precompiled database
// (a fresh process has nothing in memory) compiles no probe. Shown here by a
// finding written into the database for texts this process never probed,
// which the calls then answer with, NVRTC untouched; and only from a
// database whose cubins are trusted.
TEST(ModifierProbe, AFindingKeptInTheDatabaseAnswersWithoutAProbe) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("flashjit-probe-facts", dir));
  auto cleanup = llvm::make_scope_exit([&] {
    ::chmod(dir.c_str(), 0700);
    llvm::sys::fs::remove_directories(dir);
  });
  llvm::SmallString<128> path(dir);
  llvm::sys::path::append(path, "t.db");
  auto db = TuningDb::open(path);
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());

  // Probed with the database: the finding is stored under its key.
  const Modifiers per_batch =
      mask("__device__ bool mask_mod(int b, int h, int q, int k) { return b > 0 || k <= q; }\n");
  const uint64_t probes = modifier_probe_compiles();
  auto reads = mask_mod_reads(per_batch, kSm90a, db->get());
  ASSERT_TRUE(bool(reads)) << llvm::toString(reads.takeError());
  EXPECT_EQ(*reads, (MaskModReads{true, false}));
  EXPECT_EQ(modifier_probe_compiles(), probes + 1);
  const std::string key =
      "mask_mod_reads:" + modifiers_hash(mask_mod_probed(per_batch)) + ":sm_90a";
  auto stored = (*db)->get_snippet_fact(key);
  ASSERT_TRUE(bool(stored)) << llvm::toString(stored.takeError());
  EXPECT_EQ(stored->value_or("(none)"), "b=1 h=0");

  // Findings for texts never probed here, deliberately unlike what a probe
  // would find: the calls answer from the database, without NVRTC.
  const Modifiers causal =
      mask("__device__ bool mask_mod(int b, int h, int q, int k) { return k <= q; } // kept\n");
  ASSERT_FALSE(bool((*db)->put_snippet_fact(
      "mask_mod_reads:" + modifiers_hash(mask_mod_probed(causal)) + ":sm_90a", "b=0 h=1")));
  Modifiers halved;
  halved.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k) { return 0.5f * s; }\n"
      "// kept\n";
  ASSERT_FALSE(bool((*db)->put_snippet_fact(
      "score_mod_grad:" + modifiers_hash(score_mod_grad_probed(halved)) + ":sm_80", "1")));
  const uint64_t compiles = runtime_counters().compiles.load();
  auto kept = mask_mod_reads(causal, kSm90a, db->get());
  ASSERT_TRUE(bool(kept)) << llvm::toString(kept.takeError());
  EXPECT_EQ(*kept, (MaskModReads{false, true}));
  auto resolved = resolve_modifiers(causal, Pass::forward, kSm90a, db->get());
  ASSERT_TRUE(bool(resolved)) << llvm::toString(resolved.takeError());
  EXPECT_EQ(resolved->mask_mod_qk_only, MaskModQkOnly::off);
  auto defined = score_mod_defines_grad(halved, db->get());
  ASSERT_TRUE(bool(defined)) << llvm::toString(defined.takeError());
  EXPECT_TRUE(*defined);
  EXPECT_EQ(modifier_probe_compiles(), probes + 1);
  EXPECT_EQ(runtime_counters().compiles.load(), compiles);

  // A database others can write answers nothing: the finding is probed.
  const Modifiers windowed =
      mask("__device__ bool mask_mod(int b, int h, int q, int k) { return k + 64 > q; }\n");
  ASSERT_FALSE(bool((*db)->put_snippet_fact(
      "mask_mod_reads:" + modifiers_hash(mask_mod_probed(windowed)) + ":sm_90a", "b=1 h=1")));
  ASSERT_EQ(::chmod(dir.c_str(), 0777), 0);
  auto untrusted = TuningDb::open(path);
  ASSERT_TRUE(bool(untrusted)) << llvm::toString(untrusted.takeError());
  auto ignored = (*untrusted)->get_snippet_fact(
      "mask_mod_reads:" + modifiers_hash(mask_mod_probed(windowed)) + ":sm_90a");
  ASSERT_TRUE(bool(ignored)) << llvm::toString(ignored.takeError());
  EXPECT_FALSE(ignored->has_value());
  auto probed = mask_mod_reads(windowed, kSm90a, untrusted->get());
  ASSERT_TRUE(bool(probed)) << llvm::toString(probed.takeError());
  EXPECT_EQ(*probed, MaskModReads{});
  EXPECT_EQ(modifier_probe_compiles(), probes + 2);
}

// What a pass compiles: `automatic` decided by the probe; the backward's
// derivative given apart or in the snippet, never both, never neither.
TEST(ModifierProbe, ResolvesWhatAPassCompiles) {
  auto resolved_qk = [](const Modifiers &m) {
    auto resolved = resolve_modifiers(m, Pass::forward, kSm90a);
    EXPECT_TRUE(bool(resolved)) << (resolved ? "" : llvm::toString(resolved.takeError()));
    return resolved ? resolved->mask_mod_qk_only : MaskModQkOnly::automatic;
  };
  EXPECT_EQ(resolved_qk(mods::document_mask()), MaskModQkOnly::off);
  Modifiers window = mods::sliding_window_with_sinks();
  window.mask_mod_qk_only = MaskModQkOnly::automatic;
  EXPECT_EQ(resolved_qk(window), MaskModQkOnly::on);
  // The kernel of a detected mask is the one the flag names: the same id.
  Modifiers declared = window;
  declared.mask_mod_qk_only = MaskModQkOnly::on;
  auto detected = resolve_modifiers(window, Pass::forward, kSm90a);
  ASSERT_TRUE(bool(detected));
  EXPECT_EQ(modifiers_hash(*detected), modifiers_hash(declared));
  // `automatic` and `off` name one kernel until a call resolves them.
  Modifiers off = window;
  off.mask_mod_qk_only = MaskModQkOnly::off;
  EXPECT_EQ(modifiers_hash(window), modifiers_hash(off));

  const std::string alibi =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return score + aux.slopes[h] * (k - q);\n}\n";
  const std::string grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) "
      "{\n  return 1.f;\n}\n";
  Modifiers in_snippet;
  in_snippet.score_mod = alibi + grad;
  in_snippet.aux = {{"const float*", "slopes"}};
  EXPECT_EQ(error_of(check_score_mod_grad(in_snippet)), "");
  Modifiers apart = in_snippet;
  apart.score_mod = alibi;
  apart.score_mod_grad = grad;
  EXPECT_EQ(error_of(check_score_mod_grad(apart)), "");
  Modifiers both = in_snippet;
  both.score_mod_grad = grad;
  EXPECT_EQ(error_of(check_score_mod_grad(both)),
            "score_mod_grad is given apart and the score_mod's source defines one too: give one "
            "of them (neither replaces the other)");
  Modifiers neither = apart;
  neither.score_mod_grad.clear();
  EXPECT_EQ(error_of(check_score_mod_grad(neither)),
            "the score_mod has no score_mod_grad, d score_mod / d score, which the backward "
            "needs: define float score_mod_grad(float score, int b, int h, int q, int k, const "
            "Aux &aux) in the score_mod's source (or give it apart), or run the forward alone");
  EXPECT_EQ(error_of(resolve_modifiers(neither, Pass::backward, kSm90a).takeError()),
            error_of(check_score_mod_grad(neither)));
  // The forward never needs it.
  EXPECT_EQ(error_of(resolve_modifiers(neither, Pass::forward, kSm90a).takeError()), "");
}

// The backward's prelude calls the snippet's derivative where none is given
// apart (the forward's text is as before), and a compile names its absence.
TEST(ModifierProbe, TheBackwardPreludeFindsTheSnippetsDerivative) {
  Modifiers m;
  m.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return s * aux.scale;\n}\n";
  m.aux = {{"float", "scale"}};
  const std::string grad =
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.scale;\n}\n";
  const std::string forward = modifiers_prelude(m, 1, "p.cu");
  EXPECT_EQ(forward.find("score_mod_grad"), std::string::npos);
  EXPECT_NE(forward.find("static float score_grad(float s, int b, int h, int q, int k, const "
                         "void *aux) {\n    return 1.f;"),
            std::string::npos);
  Modifiers apart = m;
  apart.score_mod_grad = grad;
  // Given apart: the backward's text is what it was.
  EXPECT_EQ(modifiers_prelude(apart, 1, "p.cu", true).find("NoScoreModGrad"), std::string::npos);
  const std::string backward = modifiers_prelude(m, 1, "p.cu", true);
  for (const char *piece :
       {"::flashjit::NoScoreModGrad score_mod_grad(A...)",
        "static_assert(::flashjit::kIsScoreModGrad<decltype(::score_mod_grad(s, b, h, q, k, "
        "*static_cast<const ::Aux *>(aux)))>,",
        "return ::score_mod_grad(s, b, h, q, k, *static_cast<const ::Aux *>(aux));"})
    EXPECT_NE(backward.find(piece), std::string::npos) << piece;
  // Compiled: with the derivative in the snippet, score_grad is it; without,
  // the static_assert says what is missing.
  auto program = [](const Modifiers &mods) {
    GeneratedSource source = modified_program("grad_probe.cu", "common/types.cuh", {"probe"}, mods,
                                              kernel_compile_options(), /*backward=*/true);
    source.source +=
        "extern \"C\" __global__ void probe(float *out, const void *aux) {\n"
        "  out[0] = flashjit::cfg::Modifiers::score_grad(out[1], 0, 1, 2, 3, aux);\n"
        "}\n";
    return source;
  };
  Modifiers with = m;
  with.score_mod += grad;
  auto cubin = compile_to_cubin(program(with), kSm90a);
  EXPECT_TRUE(bool(cubin)) << (cubin ? "" : llvm::toString(cubin.takeError()));
  auto refused = compile_to_cubin(program(m), kSm90a);
  ASSERT_FALSE(bool(refused));
  EXPECT_NE(llvm::toString(refused.takeError()).find(score_mod_grad_missing(m)), std::string::npos);
}

// The readers on PTX as NVRTC writes it: a parameter is read where the
// entry's body names its symbol (param_1 is not param_10); the derivative's
// variable with or without an initialiser.
TEST(ModifierProbe, ReadsThePtx) {
  const std::string entry = std::string(".visible .entry ") + kMaskProbeEntry +
                            "(\n"
                            "\t.param .u32 flashjit_probe_mask_mod_param_0,\n"
                            "\t.param .u32 flashjit_probe_mask_mod_param_1,\n"
                            "\t.param .u64 flashjit_probe_mask_mod_param_10\n)\n{\n";
  auto reads = read_mask_mod_probe(entry +
                                   "\tld.param.u64 %rd1, [flashjit_probe_mask_mod_param_10];\n"
                                   "\tld.param.u32 %r1, [flashjit_probe_mask_mod_param_0+4];\n"
                                   "\tret;\n}\n");
  ASSERT_TRUE(bool(reads)) << llvm::toString(reads.takeError());
  EXPECT_EQ(*reads, (MaskModReads{true, false}));
  EXPECT_NE(error_of(read_mask_mod_probe("// nothing\n").takeError()).find("has no kernel"),
            std::string::npos);
  auto found = read_score_mod_grad_probe(
      "\t// .globl\tflashjit_probe_score_mod_grad\n"
      ".visible .global .align 4 .u32 flashjit_probe_score_mod_grad = 1;\n");
  ASSERT_TRUE(bool(found));
  EXPECT_TRUE(*found);
  auto zero =
      read_score_mod_grad_probe(".visible .global .align 4 .u32 flashjit_probe_score_mod_grad;\n");
  ASSERT_TRUE(bool(zero));
  EXPECT_FALSE(*zero);
  EXPECT_NE(error_of(read_score_mod_grad_probe("").takeError()).find("does not define"),
            std::string::npos);
}

}  // namespace
}  // namespace flashjit
