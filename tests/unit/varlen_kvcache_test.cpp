// The serving call without a GPU: a packed batch of queries over
// a KV cache, paged through a block table and/or with per-sequence key
// counts (flash_attn_varlen_func's seqused_k and block_table). Problem and
// argument validation with their messages, the kernel ID and prelude (no
// append kernel: a packed batch reads its cache as it is), the backward's
// refusal, and NVRTC compiles of both families (split-KV and packed GQA
// included) with no spills.
#include <gtest/gtest.h>

#include <string>

#include "cli/problem_flags.h"
#include "cli_runner.h"
#include "generator/backward_spec.h"
#include "generator/fwd_sm90_traits.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "runtime/call_key.h"
#include "runtime/launch_forward.h"
#include "runtime/tuning_key.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

// Four sequences of up to 600 queries over a paged cache of 4096 keys per
// sequence (the block table's width times the page size).
Problem serving_problem(int page_size = 64, int d = 128, MaskKind mask = MaskKind::causal) {
  Problem p;
  p.batch = 4;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = 600;
  p.seqlen_k = 4096;
  p.head_dim_qk = p.head_dim_v = d;
  p.mask = mask;
  p.varlen = true;
  p.seqused_k = true;
  p.page_size = page_size;
  return p;
}

const void *fake(uintptr_t address) { return reinterpret_cast<const void *>(address); }
const int32_t *fake_ints(uintptr_t address) { return static_cast<const int32_t *>(fake(address)); }

ForwardArgs serving_args(const Problem &p, int64_t total_q = 1000) {
  ForwardArgs a;
  a.q = fake(0x10000);
  a.k = fake(0x20000);
  a.v = fake(0x30000);
  a.o = const_cast<void *>(fake(0x40000));
  a.q_strides = {0, p.heads_q * p.head_dim_qk, p.head_dim_qk};
  // The cache: [num_pages, page_size, heads_kv, d].
  a.k_strides = {p.page_size * p.heads_kv * p.head_dim_qk, p.heads_kv * p.head_dim_qk,
                 p.head_dim_qk};
  a.v_strides = {p.page_size * p.heads_kv * p.head_dim_v, p.heads_kv * p.head_dim_v, p.head_dim_v};
  a.o_strides = {0, p.heads_q * p.head_dim_v, p.head_dim_v};
  a.varlen.cu_seqlens_q = fake_ints(0x50000);
  a.varlen.total_q = total_q;
  a.cache.cache_seqlens = fake_ints(0x60000);  // seqused_k
  a.cache.page_table = fake_ints(0x70000);
  a.cache.page_table_stride = p.page_size > 0 ? p.seqlen_k / p.page_size : 0;
  a.cache.num_pages = 1000;
  return a;
}

std::string args_error(const Problem &p, const ForwardArgs &a) {
  return llvm::toString(validate_forward_args(p, a));
}

TEST(VarlenKvCacheValidation, ThePackedQueriesMayReadACache) {
  EXPECT_EQ(llvm::toString(validate_problem(serving_problem())), "");
  Problem contiguous = serving_problem(0);
  EXPECT_EQ(llvm::toString(validate_problem(contiguous)), "");
  // The cache's capacity is the block table's width times the page size.
  Problem odd = serving_problem();
  odd.seqlen_k = 4000;
  EXPECT_EQ(llvm::toString(validate_problem(odd)),
            "seqlen_k=4000 is not a multiple of page_size=64: with a paged cache seqlen_k is the "
            "page table's width (pages per sequence) times page_size");
}

TEST(VarlenKvCacheValidation, ArgumentsAreCheckedBeforeTheDriver) {
  const Problem p = serving_problem();
  // Paged with seqused_k: no key offsets needed (vLLM passes none). The
  // pointers are fake, so the first check that can fail past the host's
  // is the driver's (or its absence): never a message about the arguments.
  const std::string ok = args_error(p, serving_args(p));
  EXPECT_EQ(ok.find("varlen."), std::string::npos) << ok;
  EXPECT_EQ(ok.find("cache."), std::string::npos) << ok;
  {
    ForwardArgs a = serving_args(p);
    a.varlen.total_k = 5000;
    EXPECT_EQ(args_error(p, a),
              "varlen.total_k=5000 was given for a packed batch over a paged cache "
              "(page_size=64): its keys are the cache's pages, not packed rows; pass 0");
  }
  {
    // Without seqused_k the counts come from cu_seqlens_k, which is then required.
    Problem counts_from_offsets = p;
    counts_from_offsets.seqused_k = false;
    ForwardArgs a = serving_args(counts_from_offsets);
    a.cache.cache_seqlens = nullptr;
    EXPECT_EQ(args_error(counts_from_offsets, a),
              "varlen.cu_seqlens_q and cu_seqlens_k are required for a packed batch: int32 "
              "[batch + 1] device arrays of each sequence's first row (0 first, the total "
              "last); cu_seqlens_k may be null only over a paged cache with per-sequence key "
              "counts (seqused_k)");
  }
  {
    ForwardArgs a = serving_args(p);
    a.cache.cache_seqlens = nullptr;
    EXPECT_EQ(args_error(p, a),
              "cache.cache_seqlens is null: the problem has per-sequence key counts "
              "(seqused_k); pass an int32 [batch] device array");
  }
  {
    ForwardArgs a = serving_args(p);
    a.cache.page_table = nullptr;
    EXPECT_EQ(args_error(p, a),
              "cache.page_table is null: a paged cache (page_size=64) needs an int32 [batch, "
              "seqlen_k / page_size] device array");
  }
  {
    // Packed new keys need their sequences' rows, and those rows need new keys.
    ForwardArgs a = serving_args(p);
    a.cache.k_new = fake(0x80000);
    a.cache.v_new = fake(0x90000);
    a.cache.seqlen_new = 1;
    EXPECT_EQ(args_error(p, a),
              "cache.k_new/v_new were given for a packed batch (varlen) without cu_seqlens_k_new: "
              "pass each sequence's first new row (int32 [batch + 1]), or append the new keys "
              "first");
    ForwardArgs b = serving_args(p);
    b.cache.cu_seqlens_k_new = static_cast<const int32_t *>(fake(0xa0000));
    EXPECT_EQ(args_error(p, b),
              "cache.cu_seqlens_k_new was given without packed new keys: it places a packed "
              "batch's (varlen) k_new/v_new rows; pass them, or null");
    // More packed rows than a sequence's capacity are fine; none are not.
    a.cache.cu_seqlens_k_new = b.cache.cu_seqlens_k_new;
    a.cache.seqlen_new = 0;
    EXPECT_EQ(args_error(p, a),
              "cache.seqlen_new=0 is invalid: a packed batch's new keys are 1 to 2^31-1 rows");
  }
  {
    // Contiguous keys with seqused_k start at cu_seqlens_k: it is required.
    const Problem contiguous = serving_problem(0);
    ForwardArgs a = serving_args(contiguous);
    a.cache.page_table = nullptr;
    a.k_strides = a.v_strides = {0, contiguous.heads_kv * 128, 128};
    EXPECT_NE(args_error(contiguous, a).find("cu_seqlens_k may be null only over a paged cache"),
              std::string::npos);
  }
}

TEST(VarlenKvCacheSource, IdPreludeEntriesAndKeys) {
  auto spec =
      make_forward_spec(serving_problem(), KernelConfig{KernelPath::sm90, 128, 128, 12, 2}, kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->id(),
            "fwd_sm90_bf16_hdqk128_hdv128_causal_nocap_bm128_bn128_w12_s2_seqused_page64_varlen_"
            "sm_90a");
  const GeneratedSource source = generate_forward(*spec);
  for (const char *line : {"constexpr bool kVarlen = true;\n", "constexpr bool kSeqUsedK = true;\n",
                           "constexpr int kPageSize = 64;\n"})
    EXPECT_NE(source.source.find(line), std::string::npos) << line;
  // The sequences' order for persistent CTAs, as any packed batch's, and the
  // append of packed new keys (cu_seqlens_k_new), loaded with the program.
  EXPECT_EQ(source.entries,
            (std::vector<std::string>{"flashjit_fwd_sm90", "flashjit_fwd_sequence_order",
                                      "flashjit_kv_append"}));
  EXPECT_TRUE(appends_keys(*spec));
  EXPECT_TRUE(spec->varlen && spec->seqused_k);
  EXPECT_EQ(spec->page_size, 64);
  // Its own call class: neither the dense cache's nor the packed batch's.
  Problem packed = serving_problem();
  packed.seqused_k = false;
  packed.page_size = 0;
  Problem dense_cache = serving_problem();
  dense_cache.varlen = false;
  EXPECT_FALSE(CallKey::make(1, serving_problem(), {}) == CallKey::make(1, packed, {}));
  EXPECT_FALSE(CallKey::make(1, serving_problem(), {}) == CallKey::make(1, dense_cache, {}));
  // Tuned as a class of its own too: the KV layout names both.
  EXPECT_EQ(problem_class_key(serving_problem()).kv_layout, "packed-paged64");
  EXPECT_EQ(problem_class_key(serving_problem(0)).kv_layout, "packed");
  EXPECT_EQ(problem_class_key(dense_cache).kv_layout, "paged64");
  // The dense cache keeps its append kernel.
  auto dense_spec =
      make_forward_spec(dense_cache, KernelConfig{KernelPath::sm90, 128, 128, 12, 2}, kSm90a);
  ASSERT_TRUE(bool(dense_spec));
  EXPECT_TRUE(appends_keys(*dense_spec));
}

TEST(VarlenKvCacheSource, TheBackwardTakesNoCache) {
  auto bwd =
      make_backward_spec(serving_problem(), KernelConfig{KernelPath::sm90, 64, 128, 12, 1}, kSm90a);
  ASSERT_FALSE(bool(bwd));
  EXPECT_NE(llvm::toString(bwd.takeError()).find("the backward takes no KV cache"),
            std::string::npos);
}

TEST(VarlenKvCacheCli, GenAndRunTakeTheCache) {
  auto gen = testing_cli::run_cli({"gen", "--arch", "sm_90a", "--varlen", "--seqlens-q", "1,1,300",
                                   "--seqlens-k", "4096,100,700", "--page-size", "64",
                                   "--cache-seqlens", "--causal"});
  ASSERT_EQ(gen.code, 0) << gen.err;
  for (const char *line : {"constexpr bool kVarlen = true;", "constexpr bool kSeqUsedK = true;",
                           "constexpr int kPageSize = 64;", "_seqused_page64_varlen_sm_90a"})
    EXPECT_NE(gen.out.find(line), std::string::npos) << line;
  // The cache's capacity is the longest sequence's keys in whole pages.
  cli::ProblemFlagValues v;
  v.varlen = true;
  v.seqlens_q = "1,300";
  v.seqlens_k = "4000,700";
  v.page_size = "64";
  v.cache_seqlens = true;
  auto parsed = cli::parse_problem_flags(v);
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->problem.seqlen_k, 4032);
  EXPECT_EQ(parsed->problem.seqlen_q, 300);
  // `run` draws the serving call's inputs: the flags are taken (here the
  // GPU is what may be missing, never the flags).
  auto run = testing_cli::run_cli({"run", "--varlen", "--seqlens-q", "1,300", "--seqlens-k",
                                   "4000,700", "--page-size", "64", "--cache-seqlens", "--heads",
                                   "8", "--heads-kv", "2", "--check", "--repeats", "2"});
  if (run.code == 1 && run.err.find("run needs a GPU") != std::string::npos) return;
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("cache    pages of 64 rows, shuffled, 4032 keys per sequence at most, "
                         "counts from seqused_k\n"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("check    PASS"), std::string::npos) << run.out;
}

TEST(VarlenKvCacheCompile, Sm90KernelsCompileWithoutSpills) {
  struct Variant {
    int page_size, d;
    MaskKind mask;
    bool seqused;
    int block_m, block_n, stages, splits;
    GqaPacking pack;
  };
  const Variant variants[] = {
      {64, 128, MaskKind::causal, true, 128, 128, 2, 1, GqaPacking::off},   // prefill chunks
      {16, 128, MaskKind::none, true, 64, 128, 2, 4, GqaPacking::on},       // decode: split, packed
      {256, 64, MaskKind::window, false, 192, 112, 2, 1, GqaPacking::off},  // counts from offsets
      {0, 256, MaskKind::causal, true, 128, 80, 2, 3, GqaPacking::off},     // contiguous, seqused
  };
  const auto compiled = testing::compile_forward_variants(
      std::size(variants),
      [&](size_t i) {
        const Variant &v = variants[i];
        Problem p = serving_problem(v.page_size, v.d, v.mask);
        p.seqused_k = v.seqused;
        p.window_left = 256;
        p.window_right = 0;
        KernelConfig c{KernelPath::sm90, v.block_m, v.block_n, FwdSm90Traits::warps_for(v.block_m),
                       v.stages};
        c.splits = v.splits;
        c.pack_gqa = v.pack;
        return make_forward_spec(p, c, kSm90a);
      },
      kSm90a);
  for (const auto &c : compiled) testing::expect_clean(c, {"flashjit_fwd_sm90"});
}

TEST(VarlenKvCacheCompile, Sm80KernelsCompileWithoutSpills) {
  // Page 1: the row gather, as SGLang's pages.
  const int pages[] = {16, 64, 0, 1};
  const KernelConfig tiles[] = {{KernelPath::sm80, 64, 64, 4, 2},
                                {KernelPath::sm80, 128, 32, 8, 3},
                                {KernelPath::sm80, 64, 64, 4, 2},
                                {KernelPath::sm80, 64, 64, 4, 2}};
  const auto compiled = testing::compile_forward_variants(
      std::size(tiles),
      [&](size_t i) {
        Problem p = serving_problem(pages[i], i == 1 ? 96 : 128);
        KernelConfig c = tiles[i];
        c.splits = i == 0 ? 4 : 1;
        c.pack_gqa = GqaPacking::off;
        return make_forward_spec(p, c, kSm80);
      },
      kSm80);
  // The append of packed new keys (kv_append.cuh's packed branch) compiles with each.
  for (const auto &c : compiled)
    testing::expect_clean(c, {"flashjit_fwd_sm80", "flashjit_kv_append"});
}

}  // namespace
}  // namespace flashjit
