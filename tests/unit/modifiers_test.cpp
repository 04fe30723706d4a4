// A caller's modifiers without a GPU: validation and its
// messages, the aux struct's layout, the hash in the kernel id, the
// generated prelude and its #line numbering, NVRTC compiles for sm_90a and
// sm_80 (compile errors reported in the snippet's own lines), the CLI's
// --score-mod/--mask-mod/--aux, and the reference's modifier hook.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "cli_files.h"
#include "cli_runner.h"
#include "flashjit/forward.h"
#include "flashjit/mods.h"
#include "generator/block_map.h"
#include "flashjit/backward.h"
#include "generator/backward_spec.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "generator/source.h"
#include "reference/cpu_attention.h"
#include "reference/gpu_reference.h"
#include "runtime/block_map_cache.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/ThreadPool.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

const char *kAlibi =
    "// ALiBi\n"
    "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return score + aux.slopes[h] * (k - q);\n"
    "}\n";
const char *kDocuments =
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  return aux.doc_ids[q] == aux.doc_ids[k];\n"
    "}\n";

Modifiers alibi_and_documents() {
  Modifiers m;
  m.score_mod = kAlibi;
  m.mask_mod = kDocuments;
  m.aux = {{"const float*", "slopes"}, {"const int*", "doc_ids"}};
  return m;
}

std::string error_of(llvm::Error e) { return e ? llvm::toString(std::move(e)) : ""; }

Problem problem_of(int64_t batch, int64_t heads_q, int64_t heads_kv, int64_t seqlen,
                   MaskKind mask = MaskKind::none, int head_dim = 128) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = head_dim;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.mask = mask;
  return p;
}

// kDocuments with its one field.
Modifiers documents_only() {
  Modifiers m;
  m.mask_mod = kDocuments;
  m.aux = {{"const int*", "doc_ids"}};
  return m;
}

TEST(Modifiers, ValidationNamesTheFieldAndWhatWasExpected) {
  EXPECT_EQ(error_of(validate_modifiers({})), "");
  EXPECT_EQ(error_of(validate_modifiers(alibi_and_documents())), "");
  Modifiers m = alibi_and_documents();
  m.aux[0].type = "double";
  EXPECT_EQ(error_of(validate_modifiers(m)),
            "modifiers: aux field 'slopes' has type 'double': expected one of const float*, "
            "const int*, const long long*, const unsigned char*, float, int, long long");
  m = alibi_and_documents();
  m.aux[1].name = "2ids";
  EXPECT_EQ(error_of(validate_modifiers(m)),
            "modifiers: aux field name '2ids' is not a C identifier");
  m = alibi_and_documents();
  m.aux[1].name = "slopes";
  EXPECT_EQ(error_of(validate_modifiers(m)), "modifiers: aux field 'slopes' is declared twice");
  m = alibi_and_documents();
  for (int i = 0; i < 7; ++i) m.aux.push_back({"long long", "x" + std::to_string(i)});
  EXPECT_EQ(error_of(validate_modifiers(m)),
            "modifiers: the aux fields take 72 bytes as a struct: at most 64");
  Modifiers no_function;
  no_function.aux = {{"int", "n"}};
  EXPECT_EQ(error_of(validate_modifiers(no_function)),
            "modifiers: aux fields are declared but there is no score_mod or mask_mod");
}

TEST(Modifiers, AuxIsLaidOutAsACStruct) {
  Modifiers m;
  m.score_mod = "x";
  m.aux = {{"float", "a"}, {"const float*", "p"}, {"int", "n"}, {"long long", "big"}, {"int", "m"}};
  auto layout = aux_layout(m);
  ASSERT_TRUE(bool(layout)) << llvm::toString(layout.takeError());
  ASSERT_EQ(layout->size(), 5u);
  const int offsets[] = {0, 8, 16, 24, 32}, sizes[] = {4, 8, 4, 8, 4};
  for (size_t i = 0; i < layout->size(); ++i) {
    EXPECT_EQ((*layout)[i].offset, offsets[i]) << i;
    EXPECT_EQ((*layout)[i].size, sizes[i]) << i;
  }
}

TEST(Modifiers, HashIsStableAndTellsEveryPartApart) {
  const Modifiers m = alibi_and_documents();
  // The same in every process and build: it names cubins in the database.
  EXPECT_EQ(modifiers_hash(m), "41a667243c1c2c09");
  EXPECT_EQ(modifiers_hash({}), "");
  Modifiers swapped = m;
  std::swap(swapped.score_mod, swapped.mask_mod);
  Modifiers renamed = m;
  renamed.aux[1].name = "docs";
  Modifiers reordered = m;
  std::swap(reordered.aux[0], reordered.aux[1]);
  Modifiers edited = m;
  edited.score_mod += " ";
  for (const Modifiers &other : {swapped, renamed, reordered, edited})
    EXPECT_NE(modifiers_hash(other), modifiers_hash(m));
}

KernelSpec modified_spec(const Problem &p, const TargetArch &arch, const Modifiers &m) {
  KernelConfig c = default_forward_config(p, arch, 0, {}, 132, /*modified=*/!m.empty());
  auto spec = make_forward_spec(p, c, arch);
  EXPECT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  KernelSpec s = spec ? *spec : KernelSpec{};
  s.modifiers = m;
  return s;
}

// The forward never calls score_mod_grad: its program, id and so cubin
// leave the derivative out, so a training call (with it) and an inference
// call (without) share one forward kernel; the backward's keep it.
TEST(Modifiers, TheForwardKernelIsTheSameWithOrWithoutTheDerivative) {
  Problem p;
  p.seqlen_q = p.seqlen_k = 1024;
  const TargetArch sm90a{9, 0, true};
  Modifiers inference = alibi_and_documents();
  Modifiers training = inference;
  training.score_mod_grad =
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &a) "
      "{ return 1.f; }\n";
  const KernelSpec a = modified_spec(p, sm90a, inference), b = modified_spec(p, sm90a, training);
  EXPECT_EQ(a.id(), b.id());
  EXPECT_EQ(generate_forward(a).source, generate_forward(b).source);
  EXPECT_EQ(generate_forward(b).source.find("score_mod_grad("), std::string::npos);
  KernelSpec backward = b;
  backward.pass = Pass::backward;
  KernelSpec backward_without = a;
  backward_without.pass = Pass::backward;
  EXPECT_NE(backward.id(), backward_without.id());
}

TEST(Modifiers, PreludeDefinesAuxAndNumbersTheSnippetsLines) {
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 8192;
  p.mask = MaskKind::causal;
  const KernelSpec spec = modified_spec(p, kSm90a, alibi_and_documents());
  EXPECT_EQ(spec.id(),
            "fwd_sm90_bf16_hdqk128_hdv128_causal_nocap_bm128_bn128_w12_s2_mod41a667243c1c2c09_"
            "sm_90a");
  const GeneratedSource source = generate_forward(spec);
  const std::string &text = source.source;
  for (const char *piece :
       {"struct Aux {\n  const float* slopes;\n  const int* doc_ids;\n};\n",
        "#line 1 \"score_mod\"\n// ALiBi\n", "#line 1 \"mask_mod\"\n__device__ bool mask_mod",
        "static constexpr bool kScore = true;", "static constexpr bool kMask = true;",
        "return ::score_mod(s, b, h, q, k, *static_cast<const ::Aux *>(aux));"})
    EXPECT_NE(text.find(piece), std::string::npos) << piece;
  // The #line after the snippets gives the next line its own number in the
  // generated file.
  const std::string directive = "#line ";
  const size_t resume = text.find(directive, text.find("#line 1 \"mask_mod\"") + 1);
  ASSERT_NE(resume, std::string::npos);
  const int claimed = std::stoi(text.substr(resume + directive.size()));
  int line = 1;
  for (size_t i = 0; i < resume; ++i) line += text[i] == '\n';
  EXPECT_EQ(claimed, line + 1);
  EXPECT_NE(text.find(source.program_name, resume), std::string::npos);
  // No modifiers: the default policy, the same id as before.
  KernelSpec plain = spec;
  plain.modifiers = {};
  EXPECT_EQ(plain.id(), "fwd_sm90_bf16_hdqk128_hdv128_causal_nocap_bm128_bn128_w12_s2_sm_90a");
  EXPECT_NE(generate_forward(plain).source.find("using Modifiers = NoModifiers;"),
            std::string::npos);
}

TEST(ModifiersCompile, BothFamiliesCompileTheModifiersIn) {
  struct Variant {
    TargetArch arch;
    Problem p;
    bool clean;  // no spills expected (the sm90 family; sm80's 128-row tiles are at 255)
  };
  Problem causal;
  causal.batch = 2;
  causal.heads_q = causal.heads_kv = 16;
  causal.seqlen_q = causal.seqlen_k = 4096;
  causal.mask = MaskKind::causal;
  Problem decode;
  decode.heads_q = 32;
  decode.heads_kv = 8;
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  Problem windowed = causal;
  windowed.head_dim_qk = windowed.head_dim_v = 64;
  windowed.mask = MaskKind::window;
  windowed.window_left = 100;
  windowed.window_right = 0;
  windowed.softcap = 30.f;
  Problem wide = causal;
  wide.mask = MaskKind::none;
  wide.head_dim_qk = wide.head_dim_v = 256;
  const Variant variants[] = {{kSm90a, causal, true},
                              {kSm90a, decode, true},
                              {kSm90a, windowed, true},
                              {kSm90a, wide, true},
                              {kSm80, causal, true}};
  for (const Variant &v : variants) {
    const auto compiled = testing::compile_forward_variants(
        1,
        [&](size_t) -> llvm::Expected<KernelSpec> {
          return modified_spec(v.p, v.arch, alibi_and_documents());
        },
        v.arch);
    if (v.clean)
      testing::expect_clean(compiled[0],
                            {v.arch.sm() == 90 ? "flashjit_fwd_sm90" : "flashjit_fwd_sm80"});
  }
}

// The block map of a mask_mod (templates/fwd_block_map.cuh): the sm90
// program carries its two kernels (sm80 and a score_mod alone do not), the
// host's extent of it, and mask_mod_qk_only in the hash and validation.
TEST(ModifiersBlockMap, TheSm90ProgramBuildsItAndTheHostSizesIt) {
  const Problem p = problem_of(2, 16, 16, 8192);
  const Modifiers documents = documents_only();
  Modifiers shared = documents;
  shared.mask_mod_qk_only = MaskModQkOnly::on;
  auto has_entry = [](const GeneratedSource &g, const char *entry) {
    return std::find(g.entries.begin(), g.entries.end(), entry) != g.entries.end();
  };
  const KernelSpec sm90 = modified_spec(p, kSm90a, documents);
  const GeneratedSource program = generate_forward(sm90);
  EXPECT_TRUE(has_entry(program, "flashjit_fwd_block_kinds"));
  EXPECT_TRUE(has_entry(program, "flashjit_fwd_block_list"));
  EXPECT_TRUE(has_entry(program, "flashjit_fwd_block_runs"));
  EXPECT_TRUE(has_block_map(sm90));
  Modifiers score_only;
  score_only.score_mod = kAlibi;
  score_only.aux = {{"const float*", "slopes"}};
  for (const KernelSpec &other :
       {modified_spec(p, kSm80, documents), modified_spec(p, kSm90a, score_only)}) {
    EXPECT_FALSE(has_block_map(other)) << other.id();
    EXPECT_FALSE(has_entry(generate_forward(other), "flashjit_fwd_block_kinds")) << other.id();
    EXPECT_EQ(forward_block_map_geometry(other, p).rows(), 0) << other.id();
  }
  // 128-row work tiles, 128-key tiles: 64 x 64 per (batch, head).
  const BlockMapGeometry per_head = forward_block_map_geometry(sm90, p);
  EXPECT_EQ(per_head.row_blocks, 64);
  EXPECT_EQ(per_head.tiles, 64);
  EXPECT_EQ(per_head.heads, 16);
  EXPECT_EQ(per_head.batches, 2);
  EXPECT_EQ(per_head.rows(), 2048);
  EXPECT_EQ(per_head.head_stride(), 64);
  EXPECT_EQ(per_head.batch_stride(), 1024);
  EXPECT_EQ(per_head.list_bytes(), 2048u * 65 * 4);
  EXPECT_EQ(per_head.kinds_offset() % 256, 0u);
  // Then the row runs of each row's first 4 partial tiles: their positions
  // (4 ints a row) and a word per query row of the 128-row work tile.
  EXPECT_EQ(per_head.run_words, 128);
  EXPECT_EQ(per_head.run_positions_offset(), per_head.kinds_offset() + 2048u * 64);
  EXPECT_EQ(per_head.runs_offset(), per_head.run_positions_offset() + 2048u * 4 * 4);
  EXPECT_EQ(per_head.workspace_bytes(), per_head.runs_offset() + 2048u * 4 * 128 * 4);
  EXPECT_EQ(per_head.grid_offset() % 256, 0u);
  const LaunchGeometry runs = per_head.runs_launch();
  EXPECT_EQ(runs.grid.x * runs.grid.y, 2048u);
  EXPECT_EQ(runs.grid.z, 4u);
  const LaunchGeometry kinds = per_head.kinds_launch();
  EXPECT_EQ(kinds.grid.x * kinds.grid.y * kinds.grid.z, 2048u * 64);
  EXPECT_EQ(per_head.list_launch().grid.x * per_head.list_launch().block.x, 2048u * 32);
  const KernelSpec qk_only = modified_spec(p, kSm90a, shared);
  EXPECT_NE(qk_only.id(), sm90.id());
  const BlockMapGeometry one = forward_block_map_geometry(qk_only, p);
  EXPECT_EQ(one.rows(), 64);
  EXPECT_EQ(one.head_stride(), 0);
  EXPECT_EQ(one.batch_stride(), 0);
  EXPECT_NE(generate_forward(qk_only).source.find("static constexpr bool kMaskQkOnly = true;"),
            std::string::npos);
  // Sequences of their own lengths keep a map each, qk-only or not.
  KernelSpec varlen = qk_only;
  varlen.varlen = true;
  EXPECT_EQ(forward_block_map_geometry(varlen, p).batches, 2);
  EXPECT_EQ(forward_block_map_geometry(varlen, p).heads, 1);
  // Decode with packed GQA: one row per KV head's 64-row tile.
  Problem decode;
  decode.heads_q = 32;
  decode.heads_kv = 8;
  decode.seqlen_q = 1;
  decode.seqlen_k = 8192;
  const KernelSpec packed = modified_spec(decode, kSm90a, documents);
  ASSERT_GT(packed.pack_gqa, 1);
  const BlockMapGeometry packed_map = forward_block_map_geometry(packed, decode);
  EXPECT_EQ(packed_map.heads, 8);
  EXPECT_EQ(packed_map.row_blocks, 1);
  EXPECT_EQ(packed_map.tiles, (8192 + packed.config.block_n - 1) / packed.config.block_n);
  // Its rows are several heads' whose mask_mod may differ: no row runs,
  // unless the mask reads only (q, k).
  EXPECT_EQ(packed_map.run_words, 0);
  EXPECT_EQ(packed_map.workspace_bytes(), packed_map.run_positions_offset());
  KernelSpec packed_shared = packed;
  packed_shared.modifiers.mask_mod_qk_only = MaskModQkOnly::on;
  EXPECT_EQ(forward_block_map_geometry(packed_shared, decode).run_words,
            packed.config.block_m / 64 * (64 / packed.pack_gqa));
  // qk-only without a mask_mod is a mistake, named.
  Modifiers orphan = score_only;
  orphan.mask_mod_qk_only = MaskModQkOnly::on;
  EXPECT_NE(error_of(validate_modifiers(orphan)).find("mask_mod_qk_only is set but there is no "
                                                      "mask_mod"),
            std::string::npos);
}

// Which forward maps are kept across calls (runtime/block_map_cache.h): a
// shared map of a mask of (q, k) and scalar aux values, keyed by the kernel,
// the lengths, the built-in window and the aux bytes; never a map per batch
// or head, one from a caller's block mask, or one whose aux holds a pointer.
TEST(ModifiersBlockMap, OnlyShapeOnlyMapsAreKeptAcrossCalls) {
  const Problem p = problem_of(2, 16, 16, 8192);
  const Modifiers window = mods::sliding_window_with_sinks();
  const KernelSpec spec = modified_spec(p, kSm90a, window);
  const BlockMapGeometry map = forward_block_map_geometry(spec, p);
  unsigned long long aux[8] = {1024, 4};
  auto key_of = [](const KernelSpec &s, const Problem &problem,
                   const unsigned long long(&values)[8], bool caller_mask,
                   const BlockMapGeometry &m) {
    return reusable_block_map_key(s.id(), s.modifiers, problem, values, caller_mask, m);
  };
  const std::string key = key_of(spec, p, aux, false, map);
  EXPECT_NE(key, "");
  EXPECT_EQ(key_of(spec, p, aux, false, map), key);
  EXPECT_EQ(key_of(spec, p, aux, true, map), "");
  // A program without an id (a caller that did not name it) keeps none.
  EXPECT_EQ(reusable_block_map_key("", spec.modifiers, p, aux, false, map), "");
  unsigned long long other_aux[8] = {1024, 5};
  EXPECT_NE(key_of(spec, p, other_aux, false, map), key);
  EXPECT_NE(key_of(spec, p, other_aux, false, map), "");
  Problem longer = p;
  longer.seqlen_q = longer.seqlen_k = 8193;
  EXPECT_NE(key_of(spec, longer, aux, false,
                                   forward_block_map_geometry(spec, longer)),
            key);
  // Read per batch and head: one map per (batch, head), built per call.
  Modifiers per_head = window;
  per_head.mask_mod_qk_only = MaskModQkOnly::off;
  const KernelSpec per_head_spec = modified_spec(p, kSm90a, per_head);
  EXPECT_EQ(key_of(per_head_spec, p, aux, false,
                                   forward_block_map_geometry(per_head_spec, p)),
            "");
  Modifiers documents = documents_only();
  documents.mask_mod_qk_only = MaskModQkOnly::on;
  const KernelSpec documents_spec = modified_spec(p, kSm90a, documents);
  const BlockMapGeometry documents_map = forward_block_map_geometry(documents_spec, p);
  ASSERT_EQ(documents_map.rows(), 64);
  EXPECT_EQ(key_of(documents_spec, p, aux, false, documents_map), "");
}

// The map's two kernels compile for sm_90a with the forward, without
// spills: per head, shared, packed GQA, varlen.
TEST(ModifiersBlockMap, ItsKernelsCompileCleanly) {
  const Problem p = problem_of(2, 32, 8, 2048, MaskKind::causal);
  const Modifiers documents = documents_only();
  Modifiers shared = documents;
  shared.mask_mod_qk_only = MaskModQkOnly::on;
  Problem decode = p;
  decode.seqlen_q = 1;
  decode.mask = MaskKind::none;
  Problem varlen = p;
  varlen.varlen = true;
  const std::vector<std::pair<Problem, Modifiers>> cases = {
      {p, documents}, {p, shared}, {decode, documents}, {varlen, shared}};
  const auto compiled = testing::compile_forward_variants(
      cases.size(),
      [&](size_t i) -> llvm::Expected<KernelSpec> {
        return modified_spec(cases[i].first, kSm90a, cases[i].second);
      },
      kSm90a);
  for (const auto &one : compiled)
    testing::expect_clean(one, {"flashjit_fwd_sm90", "flashjit_fwd_block_kinds",
                                "flashjit_fwd_block_list", "flashjit_fwd_block_runs"});
}

// The backward's block map (templates/bwd_block_map.cuh): a row per (batch,
// KV head, key block) listing query tiles, shared by the group's query heads
// (and by everything under mask_mod_qk_only); its two kernels in the sm90
// program only, compiled for sm_90a without spills, the main kernel too, at
// the head dims whose tiles differ (own keys at 64 and 128, the head-dim
// split at 256), in both dQ modes, and for a packed batch.
TEST(ModifiersBlockMap, TheBackwardMapsKeyBlocksToQueryTiles) {
  const Problem p = problem_of(2, 32, 8, 2048, MaskKind::causal);
  const Modifiers documents = documents_only();
  Modifiers shared = documents;
  shared.mask_mod_qk_only = MaskModQkOnly::on;
  auto spec_of = [](const Problem &problem, const TargetArch &arch, const KernelConfig &request,
                    const Modifiers &m) {
    const KernelConfig config =
        default_backward_config(problem, arch, 0, request, /*modified=*/true);
    auto spec = make_backward_spec(problem, config, arch);
    EXPECT_TRUE(static_cast<bool>(spec)) << (spec ? "" : llvm::toString(spec.takeError()));
    KernelSpec out = spec ? *spec : KernelSpec{};
    out.modifiers = m;
    return out;
  };
  auto has_entry = [](const GeneratedSource &g, const char *entry) {
    return std::find(g.entries.begin(), g.entries.end(), entry) != g.entries.end();
  };
  const KernelSpec sm90 = spec_of(p, kSm90a, {}, documents);
  ASSERT_EQ(sm90.config.path, KernelPath::sm90);
  EXPECT_TRUE(has_block_map(sm90));
  const GeneratedSource program = generate_backward(sm90);
  EXPECT_TRUE(has_entry(program, "flashjit_bwd_block_kinds"));
  EXPECT_TRUE(has_entry(program, "flashjit_bwd_block_list"));
  const int64_t key_blocks = (2048 + sm90.config.block_n - 1) / sm90.config.block_n;
  const int64_t query_tiles = (2048 + sm90.config.block_m - 1) / sm90.config.block_m;
  const BlockMapGeometry per_group = backward_block_map_geometry(sm90, p);
  EXPECT_EQ(per_group.row_blocks, key_blocks);
  EXPECT_EQ(per_group.tiles, query_tiles);
  EXPECT_EQ(per_group.heads, 8);  // KV heads: a group shares its row
  EXPECT_EQ(per_group.batches, 2);
  EXPECT_EQ(per_group.rows(), 2 * 8 * key_blocks);
  EXPECT_EQ(per_group.head_stride(), key_blocks);
  EXPECT_EQ(per_group.batch_stride(), 8 * key_blocks);
  EXPECT_EQ(per_group.list_bytes(), uint64_t(per_group.rows()) * (query_tiles + 1) * 4);
  const LaunchGeometry kinds = per_group.kinds_launch();
  EXPECT_EQ(kinds.grid.x, 16u);
  EXPECT_EQ(kinds.grid.y, unsigned(key_blocks));
  EXPECT_EQ(kinds.grid.z, unsigned(query_tiles));
  const BlockMapGeometry one = backward_block_map_geometry(spec_of(p, kSm90a, {}, shared), p);
  EXPECT_EQ(one.rows(), key_blocks);
  EXPECT_EQ(one.head_stride(), 0);
  EXPECT_EQ(one.batch_stride(), 0);
  // No runs in the backward: runs with keys as the rows cost registers the
  // d = 128 kernel does not have (causal as a mask_mod fell to 0.92x the
  // built-in, H200, 2026-12-04).
  EXPECT_EQ(one.run_words, 0);
  EXPECT_EQ(one.workspace_bytes(), one.run_positions_offset());
  KernelSpec varlen = spec_of(p, kSm90a, {}, shared);
  varlen.varlen = true;
  EXPECT_EQ(backward_block_map_geometry(varlen, p).batches, 2);
  // sm80's backward, and a score_mod alone, have none.
  Modifiers score_only;
  score_only.score_mod = kAlibi;
  score_only.score_mod_grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) "
      "{\n  return 1.f;\n}\n";
  score_only.aux = {{"const float*", "slopes"}};
  for (const KernelSpec &other : {spec_of(p, kSm90a, KernelConfig{KernelPath::sm80}, documents),
                                  spec_of(p, kSm90a, {}, score_only)}) {
    EXPECT_FALSE(has_block_map(other)) << other.id();
    EXPECT_FALSE(has_entry(generate_backward(other), "flashjit_bwd_block_kinds")) << other.id();
    EXPECT_EQ(backward_block_map_geometry(other, p).rows(), 0) << other.id();
  }
  // Compiled: d = 64, 128, 256, the deterministic mode, varlen.
  KernelConfig deterministic;
  deterministic.deterministic = true;
  Problem varlen_problem = p;
  varlen_problem.varlen = true;
  const std::vector<KernelSpec> specs = {
      spec_of(problem_of(2, 32, 8, 2048, MaskKind::causal, 64), kSm90a, {}, documents),
      sm90,
      spec_of(problem_of(2, 32, 8, 2048, MaskKind::causal, 256), kSm90a, {}, shared),
      spec_of(p, kSm90a, deterministic, documents),
      spec_of(varlen_problem, kSm90a, {}, shared)};
  const std::string cuobjdump = testing::find_cuobjdump();
  std::vector<testing::CompiledVariant> compiled(specs.size());
  llvm::ThreadPool pool(llvm::hardware_concurrency());
  for (size_t i = 0; i < specs.size(); ++i)
    pool.async([&, i] {
      compiled[i].id = specs[i].id();
      compiled[i].result =
          testing::compile_sm90_with_report(generate_backward(specs[i]), kSm90a, cuobjdump);
    });
  pool.wait();
  for (size_t i = 0; i + 1 < compiled.size(); ++i)
    testing::expect_clean(compiled[i], {"flashjit_bwd_sm90", "flashjit_bwd_block_kinds",
                                        "flashjit_bwd_block_list"});
  // The packed batch's consumers spill (88 bytes at d = 128 with an aux
  // pointer; 8 without the map): compiled, not yet clean.
  EXPECT_EQ(compiled.back().result.error, "");
  EXPECT_TRUE(compiled.back().result.cubin.has_value());
}

// The backward with modifiers: score_mod_grad in the prelude, hash and
// validation; the three backward programs (sm90, sm80, sm80's
// deterministic dQ kernel) compile them in for sm_90a and sm_80; the host
// refuses a score_mod without its derivative before any GPU work.
TEST(ModifiersBackward, TheProgramsCompileTheDerivativeIn) {
  Modifiers m = alibi_and_documents();
  m.score_mod_grad =
      "__device__ float score_mod_grad(float score, int b, int h, int q, int k, const Aux &aux) "
      "{\n  return 1.f;\n}\n";
  EXPECT_NE(modifiers_hash(m), modifiers_hash(alibi_and_documents()));
  Modifiers orphan;
  orphan.score_mod_grad = m.score_mod_grad;
  EXPECT_NE(error_of(validate_modifiers(orphan)).find("score_mod_grad is given but there is no "
                                                      "score_mod"),
            std::string::npos);
  const Problem p = problem_of(2, 8, 2, 1000, MaskKind::causal);
  struct Variant {
    TargetArch arch;
    KernelConfig request;
  };
  KernelConfig deterministic;
  deterministic.deterministic = true;
  KernelConfig sm80{KernelPath::sm80};
  KernelConfig sm80_det{KernelPath::sm80};
  sm80_det.deterministic = true;
  const Variant variants[] = {{kSm90a, {}}, {kSm90a, deterministic}, {kSm90a, sm80},
                              {kSm90a, sm80_det}, {kSm80, {}}};
  std::vector<std::string> failures(std::size(variants));
  llvm::ThreadPool pool(llvm::hardware_concurrency());
  for (size_t i = 0; i < std::size(variants); ++i)
    pool.async([&, i] {
      const Variant &v = variants[i];
      const KernelConfig config =
          default_backward_config(p, v.arch, 0, v.request, /*modified=*/true);
      auto spec = make_backward_spec(p, config, v.arch);
      if (!spec) {
        failures[i] = llvm::toString(spec.takeError());
        return;
      }
      spec->modifiers = m;
      const GeneratedSource source = generate_backward(*spec);
      for (const char *piece :
           {"#line 1 \"score_mod_grad\"", "static constexpr bool kScore = true;",
            "return ::score_mod_grad(s, b, h, q, k, *static_cast<const ::Aux *>(aux));"})
        if (source.source.find(piece) == std::string::npos)
          failures[i] = spec->id() + ": no " + piece;
      auto cubin = compile_to_cubin(source, v.arch);
      if (!cubin) failures[i] = spec->id() + ": " + llvm::toString(cubin.takeError());
    });
  pool.wait();
  for (const std::string &f : failures) EXPECT_EQ(f, "");
  // The derivative in the score_mod's own snippet: the backward program
  // calls it (found by overload resolution; its static_assert passes).
  Modifiers in_snippet = alibi_and_documents();
  in_snippet.score_mod += m.score_mod_grad;
  const KernelConfig config = default_backward_config(p, kSm80, 0, {}, /*modified=*/true);
  auto spec = make_backward_spec(p, config, kSm80);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  spec->modifiers = in_snippet;
  const GeneratedSource source = generate_backward(*spec);
  EXPECT_EQ(source.source.find("#line 1 \"score_mod_grad\""), std::string::npos);
  EXPECT_NE(source.source.find("static_assert(::flashjit::kIsScoreModGrad<"), std::string::npos);
  auto cubin = compile_to_cubin(source, kSm80);
  EXPECT_TRUE(bool(cubin)) << spec->id() << ": "
                           << (cubin ? "" : llvm::toString(cubin.takeError()));
  // Its forward program is the one without a derivative anywhere.
  KernelSpec forward = modified_spec(p, kSm80, in_snippet);
  EXPECT_EQ(generate_forward(forward).source.find("NoScoreModGrad"), std::string::npos);
}

TEST(ModifiersBackward, AScoreModWithoutItsDerivativeIsRefusedBeforeAnyGpuWork) {
  Problem p = problem_of(1, 2, 2, 64);
  p.head_dim_qk = p.head_dim_v = 64;
  Modifiers m;
  m.score_mod = "__device__ float score_mod(float s, int b, int h, int q, int k) { return s; }\n";
  // Pointers that are never read: the refusal comes first.
  BackwardArgs args = BackwardArgs::packed(p, reinterpret_cast<const void *>(0x1000),
                                           reinterpret_cast<const void *>(0x1000),
                                           reinterpret_cast<const void *>(0x1000),
                                           reinterpret_cast<const void *>(0x1000),
                                           reinterpret_cast<const void *>(0x1000),
                                           reinterpret_cast<const float *>(0x1000),
                                           reinterpret_cast<void *>(0x1000),
                                           reinterpret_cast<void *>(0x1000),
                                           reinterpret_cast<void *>(0x1000),
                                           reinterpret_cast<void *>(0x1000),
                                           backward_workspace_bytes(p));
  args.modifiers = &m;
  const Status status = backward(p, args);
  ASSERT_FALSE(status.ok());
  // Checked before the pointers, which need the driver.
  EXPECT_NE(status.message().find("argument modifiers: the score_mod has no score_mod_grad"),
            std::string::npos)
      << status.message();
  // Defined in the snippet too while given apart: both named, refused.
  Modifiers both = m;
  both.score_mod +=
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k) { return 1.f; }\n";
  both.score_mod_grad =
      "__device__ float score_mod_grad(float s, int b, int h, int q, int k) { return 1.f; }\n";
  args.modifiers = &both;
  const Status twice = backward(p, args);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.message().find("argument modifiers: score_mod_grad is given apart and the "
                                 "score_mod's source defines one too: give one of them"),
            std::string::npos)
      << twice.message();
}

TEST(ModifiersCompile, ErrorsPointIntoTheSnippet) {
  Modifiers bad;
  bad.score_mod =
      "// line 1\n"
      "__device__ float score_mod(float score, int b, int h, int q, int k) {\n"
      "  return score + undefined_thing;\n"
      "}\n";
  const KernelSpec spec = modified_spec(Problem{}, kSm90a, bad);
  auto cubin = compile_to_cubin(generate_forward(spec), kSm90a);
  ASSERT_FALSE(bool(cubin));
  const std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("score_mod(3): error: identifier \"undefined_thing\" is undefined"),
            std::string::npos)
      << message;
}

// score_mod_slope (include/flashjit/modifiers.h): the policy's kScoreSlope is
// true where the score_mod snippet defines one with the snippet's
// parameters (aux included where there are aux fields), and false where it
// defines none or one the kernels' call does not match; score_slope then
// calls it. Checked by the compiler: each probe asserts its expectation.
TEST(ModifiersCompile, ScoreModSlopeIsFoundByItsSignature) {
  const std::string alibi =
      "__device__ float score_mod(float score, int b, int h, int q, int k, const Aux &aux) {\n"
      "  return score + aux.slopes[h] * (k - q);\n"
      "}\n";
  const std::string slope =
      "__device__ float score_mod_slope(int b, int h, const Aux &aux) { return aux.slopes[h]; }\n";
  const std::string constant =
      "__device__ float score_mod(float score, int b, int h, int q, int k) {\n"
      "  return score - 0.5f * (k - q);\n"
      "}\n"
      "__device__ float score_mod_slope(int b, int h) { return -0.5f; }\n";
  // Declared without the aux parameter the kernels pass: not theirs.
  const std::string wrong = "__device__ float score_mod_slope(int b, int h) { return 1.f; }\n";
  struct Probe {
    const char *name;
    std::string score_mod;
    bool aux, expected;
  } probes[] = {{"alibi with its slope", alibi + slope, true, true},
                {"alibi without", alibi, true, false},
                {"no aux", constant, false, true},
                {"wrong signature", alibi + wrong, true, false}};
  for (const Probe &probe : probes) {
    Modifiers m;
    m.score_mod = probe.score_mod;
    if (probe.aux) m.aux = {{"const float*", "slopes"}};
    GeneratedSource source = modified_program("probe.cu", "common/types.cuh", {"probe"}, m,
                                              kernel_compile_options());
    source.source += std::string("static_assert(flashjit::cfg::Modifiers::kScoreSlope == ") +
                     (probe.expected ? "true" : "false") +
                     ", \"kScoreSlope\");\n"
                     "extern \"C\" __global__ void probe(float *out, const void *aux) {\n"
                     "  out[0] = flashjit::cfg::Modifiers::score_slope(0, 1, aux);\n"
                     "}\n";
    for (const TargetArch &arch : {kSm80, kSm90a}) {
      auto cubin = compile_to_cubin(source, arch);
      EXPECT_TRUE(bool(cubin)) << probe.name << ": "
                               << (cubin ? "" : llvm::toString(cubin.takeError()));
    }
  }
  // The shipped ALiBi declares its slope.
  EXPECT_NE(mods::alibi().score_mod.find("score_mod_slope"), std::string::npos);
}

TEST(ModifiersCli, ParsesAuxDeclarations) {
  auto fields = parse_aux_declarations("const float *slopes, int  n,const int* ids");
  ASSERT_TRUE(bool(fields)) << llvm::toString(fields.takeError());
  ASSERT_EQ(fields->size(), 3u);
  EXPECT_EQ((*fields)[0], (AuxField{"const float*", "slopes"}));
  EXPECT_EQ((*fields)[1], (AuxField{"int", "n"}));
  EXPECT_EQ((*fields)[2], (AuxField{"const int*", "ids"}));
  EXPECT_TRUE(parse_aux_declarations("")->empty());
  EXPECT_EQ(error_of(parse_aux_declarations("slopes").takeError()),
            "--aux: 'slopes' is not a declaration TYPE NAME (e.g. 'const float* slopes')");
}

TEST(ModifiersCli, GenAndCompileTakeTheSnippets) {
  using namespace testing_cli;
  TempDir dir;
  write_file(dir.file("alibi.cu"), kAlibi);
  write_file(dir.file("empty.cu"), "  \n");
  CliResult r = run_cli({"gen", "--arch", "sm_90a", "--causal", "--score-mod", dir.file("alibi.cu"),
                         "--aux", "const float* slopes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("#line 1 \"score_mod\"\n// ALiBi\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("_mod"), std::string::npos);
  r = run_cli({"compile", "--arch", "sm_90a", "--pass", "bwd", "--score-mod", dir.file("alibi.cu"),
               "--aux", "const float* slopes"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: --pass bwd with --score-mod needs a score_mod_grad (d score_mod / d "
            "score), which the backward scales by: define float score_mod_grad(float score, int "
            "b, int h, int q, int k, const Aux &aux) in " +
                dir.file("alibi.cu") + ", or give --score-mod-grad FILE\n");
  // The modifiers take registers: the widest sm90 tiles, valid without
  // them, are refused with them (they would spill).
  const std::vector<std::string> widest = {"compile", "--arch", "sm_90a", "--path", "sm90",
                                           "--hdim", "64", "--causal", "--block-m", "192",
                                           "--block-n", "128", "--warps", "16", "--stages", "3"};
  r = run_cli(widest);
  EXPECT_EQ(r.code, 0) << r.err;
  std::vector<std::string> modified = widest;
  modified.insert(modified.end(),
                  {"--score-mod", dir.file("alibi.cu"), "--aux", "const float* slopes"});
  r = run_cli(modified);
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: sm90 forward config (block_m=192 block_n=128 warps=16 stages=3, "
            "d=64 dv=64) is invalid: block_n=128 exceeds 112 at head dim 64, block_m 192 (the "
            "kernel spills; wider only without a softcap, a window, a KV cache or "
            "modifiers)\n");
  // With the derivative the backward program takes them.
  write_file(dir.file("alibi_grad.cu"),
             "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &a) "
             "{ return 1.f; }\n");
  r = run_cli({"gen", "--arch", "sm_90a", "--pass", "bwd", "--score-mod", dir.file("alibi.cu"),
               "--score-mod-grad", dir.file("alibi_grad.cu"), "--aux", "const float* slopes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("#line 1 \"score_mod_grad\""), std::string::npos);
  EXPECT_NE(r.out.find("#include \"bwd_sm90.cuh\""), std::string::npos);
  // Or in the --score-mod file itself: the backward program calls the
  // file's own (found by overload resolution, a static_assert behind it).
  write_file(dir.file("alibi_both.cu"),
             std::string(kAlibi) +
                 "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux "
                 "&a) { return 1.f; }\n");
  r = run_cli({"gen", "--arch", "sm_90a", "--pass", "bwd", "--score-mod", dir.file("alibi_both.cu"),
               "--aux", "const float* slopes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("#line 1 \"score_mod_grad\""), std::string::npos);
  for (const char *piece :
       {"::flashjit::NoScoreModGrad score_mod_grad(A...)",
        "static_assert(::flashjit::kIsScoreModGrad<decltype(::score_mod_grad(s, b, h, q, k, "
        "*static_cast<const ::Aux *>(aux)))>,",
        "return ::score_mod_grad(s, b, h, q, k, *static_cast<const ::Aux *>(aux));"})
    EXPECT_NE(r.out.find(piece), std::string::npos) << piece;
  // Both: neither is taken over the other.
  r = run_cli({"gen", "--arch", "sm_90a", "--pass", "bwd", "--score-mod", dir.file("alibi_both.cu"),
               "--score-mod-grad", dir.file("alibi_grad.cu"), "--aux", "const float* slopes"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --score-mod-grad " + dir.file("alibi_grad.cu") +
                       " and the score_mod_grad that --score-mod " + dir.file("alibi_both.cu") +
                       " defines: give one of them\n");
  r = run_cli({"gen", "--arch", "sm_90a", "--mask-mod", dir.file("empty.cu")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --mask-mod " + dir.file("empty.cu") + ": the file is empty\n");
  r = run_cli({"gen", "--arch", "sm_90a", "--aux", "int n"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: modifiers: aux fields are declared but there is no score_mod or "
            "mask_mod\n");
}

// `run` with modifiers: its scalar aux values come from --aux-value, checked
// (exactly) before any GPU work; the pointer fields are generated.
TEST(ModifiersCli, RunChecksTheModifiersFlagsBeforeAnyGpuWork) {
  using namespace testing_cli;
  TempDir dir;
  write_file(dir.file("prefix.cu"),
             "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
             "  return k < aux.prefix || k <= q;\n}\n");
  const std::string mask = dir.file("prefix.cu");
  write_file(dir.file("scale.cu"),
             "__device__ float score_mod(float s, int b, int h, int q, int k, const Aux &aux) {\n"
             "  return s * aux.prefix;\n}\n");
  const std::string scale = dir.file("scale.cu");
  const struct {
    std::vector<std::string> args;
    std::string error;
  } cases[] = {
      {{"--aux-value", "x=1"}, "--aux-value: given without --aux fields to set"},
      {{"--mask-mod", mask, "--aux", "int prefix"},
       "the aux field 'prefix' (int) needs a value: give --aux-value prefix=VALUE"},
      {{"--mask-mod", mask, "--aux", "int prefix", "--aux-value", "prefix=abc"},
       "--aux-value prefix=abc: 'prefix' is int: expected an integer"},
      {{"--mask-mod", mask, "--aux", "int prefix", "--aux-value", "prefix"},
       "--aux-value prefix: expected NAME=VALUE, e.g. prefix=1024"},
      {{"--mask-mod", mask, "--aux", "int prefix", "--aux-value", "nope=1"},
       "--aux-value nope=1: no aux field 'nope' (--aux declares the fields)"},
      {{"--mask-mod", mask, "--aux", "int prefix, const float* w", "--aux-value", "w=1",
        "--aux-value", "prefix=2"},
       "--aux-value w=1: 'w' is a pointer (const float*): flashjit generates its values"},
      {{"--mask-mod", mask, "--aux", "int prefix", "--aux-value", "prefix=3", "--aux-value",
        "prefix=4"},
       "--aux-value: 'prefix' is given twice"},
      {{"--sinks", "--page-size", "64"},
       "run: --score-mod, --mask-mod and --sinks run a dense batch (no --varlen, "
       "--cache-seqlens or --page-size): drop those or the modifiers"},
      {{"--pass", "bwd", "--score-mod", scale, "--aux", "int prefix", "--aux-value", "prefix=1"},
       "--pass bwd with --score-mod needs a score_mod_grad (d score_mod / d score), which the "
       "backward scales by: define float score_mod_grad(float score, int b, int h, int q, int "
       "k, const Aux &aux) in " +
           scale + ", or give --score-mod-grad FILE"},
  };
  for (const auto &c : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << c.error;
    EXPECT_EQ(r.err, "flashjit: error: " + c.error + "\n");
  }
  // On a GPU: ALiBi over generated slopes with the prefix mask and learned
  // sinks, checked against the GPU reference with the same modifiers.
  write_file(dir.file("alibi.cu"), kAlibi);
  const CliResult run = run_cli(
      {"run", "--score-mod", dir.file("alibi.cu"), "--mask-mod", mask, "--aux",
       "const float* slopes, int prefix", "--aux-value", "prefix=100", "--sinks", "--batch", "2",
       "--heads", "4", "--heads-kv", "2", "--seqlen", "333", "--hdim", "64", "--causal",
       "--check", "--warmup", "1", "--repeats", "2"});
  if (run.code == 1 && run.err.find("run needs a GPU") != std::string::npos) return;
  ASSERT_EQ(run.code, 0) << run.err << run.out;
  EXPECT_NE(run.out.find("aux      prefix = 100\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("aux      slopes: 2668 generated values -((i % 8) + 1) / 16\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("aux      sinks: 4 generated logits ((h % 5) - 2) * 0.7\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("check    PASS"), std::string::npos) << run.out;
  // The backward of the same modifiers (ALiBi's gradient is 1), its
  // gradients and the sinks' against the GPU reference backward.
  write_file(dir.file("alibi_grad.cu"),
             "__device__ float score_mod_grad(float score, int b, int h, int q, int k, "
             "const Aux &aux) {\n  return 1.f;\n}\n");
  const CliResult bwd = run_cli(
      {"run", "--pass", "bwd", "--score-mod", dir.file("alibi.cu"), "--score-mod-grad",
       dir.file("alibi_grad.cu"), "--mask-mod", mask, "--aux", "const float* slopes, int prefix",
       "--aux-value", "prefix=100", "--sinks", "--batch", "2", "--heads", "4", "--heads-kv", "2",
       "--seqlen", "333", "--hdim", "64", "--causal", "--check", "--warmup", "1", "--repeats",
       "2"});
  ASSERT_EQ(bwd.code, 0) << bwd.err << bwd.out;
  EXPECT_NE(bwd.out.find("aux      prefix = 100\n"), std::string::npos) << bwd.out;
  EXPECT_NE(bwd.out.find("check    PASS"), std::string::npos) << bwd.out;
  EXPECT_NE(bwd.out.find("TFLOP/s (backward FLOPs = 2.5x forward)"), std::string::npos)
      << bwd.out;
}

// The modifiers' hash is part of the tuning class (schema 4): query names
// the class a modified call looks up, and the kernel it would run.
TEST(ModifiersCli, QueryClassesTheCallByTheSnippetsHash) {
  using namespace testing_cli;
  TempDir dir;
  write_file(dir.file("alibi.cu"), kAlibi);
  const std::string db = dir.file("query.db");
  CliResult r = run_cli({"query", "--arch", "sm_90a", "--causal", "--json", "--db", db,
                         "--score-mod", dir.file("alibi.cu"), "--aux", "const float* slopes"});
  ASSERT_EQ(r.code, 0) << r.err;
  Modifiers alibi;
  alibi.score_mod = kAlibi;
  alibi.aux = *parse_aux_declarations("const float* slopes");
  const std::string hash = modifiers_hash(alibi);
  ASSERT_EQ(hash.size(), 16u);
  EXPECT_NE(r.out.find("\"modifiers\": \"" + hash + "\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("_mod" + hash), std::string::npos) << r.out;
  // The forward's class and kernel leave the derivative out.
  write_file(dir.file("grad.cu"),
             "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &a) "
             "{ return 1.f; }\n");
  const std::string without = r.out;
  r = run_cli({"query", "--arch", "sm_90a", "--causal", "--json", "--db", db, "--score-mod",
               dir.file("alibi.cu"), "--score-mod-grad", dir.file("grad.cu"), "--aux",
               "const float* slopes"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, without);
  r = run_cli({"query", "--arch", "sm_90a", "--causal", "--json", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"modifiers\": \"\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("_mod"), std::string::npos) << r.out;
  // The backward's class needs the derivative, as the call does.
  r = run_cli({"query", "--arch", "sm_90a", "--pass", "bwd", "--db", db, "--score-mod",
               dir.file("alibi.cu"), "--aux", "const float* slopes"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: --pass bwd with --score-mod needs a score_mod_grad (d score_mod / d "
            "score), which the backward scales by: define float score_mod_grad(float score, int "
            "b, int h, int q, int k, const Aux &aux) in " +
                dir.file("alibi.cu") + ", or give --score-mod-grad FILE\n");
}

// query says which block maps a call of a mask_mod builds, and why: left to
// the probe, a mask of q and k alone shares one map (the kernel of
// mask_mod_qk_only), one that reads b keeps one per batch and head; the
// flag decides where given, =false included.
TEST(ModifiersCli, QuerySaysWhichBlockMapACallBuilds) {
  using namespace testing_cli;
  TempDir dir;
  write_file(dir.file("shared.cu"), kDocuments);
  const char *by_batch =
      "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
      "  return aux.doc_ids[b * 4096 + q] == aux.doc_ids[b * 4096 + k];\n}\n";
  write_file(dir.file("by_batch.cu"), by_batch);
  const std::string db = dir.file("query.db");
  auto query = [&](const std::string &file, std::vector<std::string> flags) {
    std::vector<std::string> args = {
        "query", "--arch",     "sm_90a",       "--causal", "--db",
        db,      "--mask-mod", dir.file(file), "--aux",    "const int* doc_ids"};
    args.insert(args.end(), flags.begin(), flags.end());
    return run_cli(args);
  };
  auto hash_of = [](const char *text, MaskModQkOnly qk_only) {
    Modifiers m;
    m.mask_mod = text;
    m.aux = {{"const int*", "doc_ids"}};
    m.mask_mod_qk_only = qk_only;
    return "_mod" + modifiers_hash(m);
  };
  CliResult r = query("shared.cu", {});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("block map  one for every batch and head (mask_mod reads neither b nor h "
                       "on sm_90a)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(hash_of(kDocuments, MaskModQkOnly::on)), std::string::npos) << r.out;
  r = query("by_batch.cu", {"--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object o = testing_cli::parse_json(r.out);
  EXPECT_EQ(testing_cli::S(o.getString("block_map")),
            "one per batch and head (mask_mod reads b on sm_90a)");
  EXPECT_NE(testing_cli::S(o.getString("kernel_id")).find(hash_of(by_batch, MaskModQkOnly::off)),
            std::string::npos)
      << r.out;
  r = query("shared.cu", {"--mask-mod-qk-only=false"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("block map  one per batch and head (--mask-mod-qk-only=false)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find(hash_of(kDocuments, MaskModQkOnly::off)), std::string::npos) << r.out;
  r = query("by_batch.cu", {"--mask-mod-qk-only"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("block map  one for every batch and head (--mask-mod-qk-only)\n"),
            std::string::npos)
      << r.out;
}

TEST(ModifiersReference, HookAppliesScoreAndMask) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 2;
  p.seqlen_q = p.seqlen_k = 5;
  p.head_dim_qk = p.head_dim_v = 8;
  const auto q = random_values(p.dtype, q_elements(p), 1);
  const auto k = random_values(p.dtype, k_elements(p), 2);
  const auto v = random_values(p.dtype, v_elements(p), 3);
  // A mask_mod of causal is the built-in causal; a score_mod adding a
  // constant changes nothing but the LSE (by that constant).
  ReferenceModifiers causal;
  causal.visible = [](int64_t, int64_t, int64_t q, int64_t k) { return k <= q; };
  Problem built_in = p;
  built_in.mask = MaskKind::causal;
  const AttentionOutputs a = cpu_attention(p, q, k, v, ReferencePrecision::exact, causal);
  const AttentionOutputs b = cpu_attention(built_in, q, k, v);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  ReferenceModifiers shift;
  shift.score = [](double s, int64_t, int64_t, int64_t, int64_t) { return s + 2.0; };
  const AttentionOutputs c = cpu_attention(p, q, k, v, ReferencePrecision::exact, shift);
  const AttentionOutputs d = cpu_attention(p, q, k, v);
  for (size_t i = 0; i < c.out.size(); ++i) EXPECT_NEAR(c.out[i], d.out[i], 1e-6) << i;
  for (size_t i = 0; i < c.lse.size(); ++i) EXPECT_NEAR(c.lse[i], d.lse[i] + 2.0, 1e-5) << i;
}

}  // namespace
}  // namespace flashjit

namespace flashjit {
namespace {

TEST(ModifiersApi, AuxValuesPackTheStructByName) {
  Modifiers m;
  m.score_mod = "x";
  m.aux = {{"float", "scale"}, {"const float*", "slopes"}, {"int", "prefix"}};
  AuxValues aux(m);
  EXPECT_EQ(aux.error(), "");
  EXPECT_EQ(aux.size(), 24u);  // float at 0, pointer at 8, int at 16, padded to 8
  const float *slopes = reinterpret_cast<const float *>(0x1000);
  EXPECT_EQ(aux.set("scale", 0.5f), "");
  EXPECT_EQ(aux.set("slopes", static_cast<const void *>(slopes)), "");
  EXPECT_EQ(aux.set("prefix", 7LL), "");
  const unsigned char *bytes = static_cast<const unsigned char *>(aux.data());
  float scale = 0;
  const void *pointer = nullptr;
  int prefix = 0;
  std::memcpy(&scale, bytes, 4);
  std::memcpy(&pointer, bytes + 8, 8);
  std::memcpy(&prefix, bytes + 16, 4);
  EXPECT_EQ(scale, 0.5f);
  EXPECT_EQ(pointer, slopes);
  EXPECT_EQ(prefix, 7);
  EXPECT_EQ(aux.set("missing", 1LL), "no aux field 'missing'");
  EXPECT_EQ(aux.set("prefix", 1.5f), "aux field 'prefix' is int: expected an integer, not a float");
  EXPECT_EQ(aux.set("scale", static_cast<const void *>(slopes)),
            "aux field 'scale' is float: expected a float, not a pointer");
  EXPECT_EQ(aux.set("prefix", 1LL << 40), "aux field 'prefix' is int: 1099511627776 does not fit");
  Modifiers bad = m;
  bad.aux[0].type = "double";
  EXPECT_NE(AuxValues(bad).error().find("has type 'double'"), std::string::npos);
}

TEST(ModifiersApi, ACallChecksItsAuxBeforeAnyGpuWork) {
  Problem p;
  p.seqlen_q = p.seqlen_k = 128;
  Modifiers m;
  m.score_mod = "x";
  m.aux = {{"const float*", "slopes"}};
  ForwardArgs args = ForwardArgs::packed(p, nullptr, nullptr, nullptr, nullptr, nullptr);
  args.modifiers = &m;
  Status s = forward(p, args);
  EXPECT_EQ(s.message(),
            "flashjit forward (" + describe(p) +
                "): argument aux: 0 bytes at a null pointer, the modifiers' struct Aux takes 8 "
                "(flashjit::AuxValues packs it)");
  Modifiers none;
  args.modifiers = &none;
  const int value = 3;
  args.aux = &value;
  args.aux_bytes = 4;
  s = forward(p, args);
  EXPECT_EQ(s.message(), "flashjit forward (" + describe(p) +
                             "): argument aux: given without modifiers to read it");
}

}  // namespace
}  // namespace flashjit

namespace flashjit {
namespace {

// Every shipped modifier validates, packs its aux, and compiles into the
// sm90 forward without spills (and into the sm80 one).
TEST(ModifiersLibrary, EveryShippedModifierCompiles) {
  const Modifiers library[] = {mods::alibi(),
                               mods::relative_bias(),
                               mods::document_mask(),
                               mods::prefix_lm(),
                               mods::sliding_window_with_sinks(),
                               mods::causal_mask()};
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 4096;
  for (const Modifiers &m : library) {
    EXPECT_EQ(error_of(validate_modifiers(m)), "");
    EXPECT_EQ(AuxValues(m).error(), "");
  }
  const auto sm90 = testing::compile_forward_variants(
      std::size(library),
      [&](size_t i) -> llvm::Expected<KernelSpec> { return modified_spec(p, kSm90a, library[i]); },
      kSm90a);
  for (const testing::CompiledVariant &v : sm90) testing::expect_clean(v, {"flashjit_fwd_sm90"});
  const auto sm80 = testing::compile_forward_variants(
      std::size(library),
      [&](size_t i) -> llvm::Expected<KernelSpec> { return modified_spec(p, kSm80, library[i]); },
      kSm80);
  for (const testing::CompiledVariant &v : sm80) EXPECT_EQ(v.result.error, "") << v.id;
}

// The GPU reference compiles a caller's modifiers in (ALiBi with documents,
// and learned sinks) for both architectures; without modifiers its program
// takes NoModifiers, and the snippets' text is in the program.
TEST(ModifiersReference, TheGpuReferenceCompilesTheModifiersIn) {
  Modifiers both = mods::alibi();
  const Modifiers documents = mods::document_mask();
  both.mask_mod = documents.mask_mod;
  both.aux.insert(both.aux.end(), documents.aux.begin(), documents.aux.end());
  Modifiers sinks;
  sinks.sinks = true;
  const GeneratedSource plain = generate_reference_attention();
  EXPECT_NE(plain.source.find("using Modifiers = NoModifiers;"), std::string::npos);
  const GeneratedSource modified = generate_reference_attention(both);
  EXPECT_NE(modified.source.find("aux.slopes[h]"), std::string::npos);
  EXPECT_NE(modified.source.find("aux.doc_ids"), std::string::npos);
  for (const TargetArch &arch : {kSm90a, kSm80})
    for (const Modifiers *m : {&both, &sinks}) {
      auto cubin = compile_to_cubin(generate_reference_attention(*m), arch);
      EXPECT_TRUE(bool(cubin)) << arch.name() << ": "
                               << (cubin ? "" : llvm::toString(cubin.takeError()));
    }
}

}  // namespace
}  // namespace flashjit
