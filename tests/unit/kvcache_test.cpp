// The KV cache without a GPU: problem and config validation with their
// messages, the cache arguments' checks, the TMA box rows host and kernel
// share, the kernel ID, prelude and entries of the generated program, the
// call key and tuning class, and NVRTC compiles of the paged kernels and the
// append kernel for sm_90a with no spills.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generator/fwd_sm90_traits.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/backward_spec.h"
#include "generator/source.h"
#include "runtime/call_key.h"
#include "runtime/launch_forward.h"
#include "runtime/tensor_checks.h"
#include "runtime/tuning_key.h"
#include "sm90_compile_check.h"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};
const TargetArch kSm80{8, 0, false};

Problem cache_problem(int page_size, bool seqused = true, int64_t seqlen_k = 4096, int d = 128) {
  Problem p;
  p.batch = 4;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = 1;
  p.seqlen_k = seqlen_k;
  p.head_dim_qk = p.head_dim_v = d;
  p.seqused_k = seqused;
  p.page_size = page_size;
  return p;
}

KernelConfig decode_tiles() {
  KernelConfig c{KernelPath::sm90, 64, 64, 8, 2};
  c.splits = 4;
  c.pack_gqa = GqaPacking::on;
  return c;
}

std::string problem_error(const Problem &p) { return llvm::toString(validate_problem(p)); }

TEST(KvCacheValidation, PageSizesFrom1To512) {
  for (int page : {1, 5, 8, 16, 24, 48, 64, 100, 256, 512})
    EXPECT_EQ(problem_error(cache_problem(page, true, page * 6)), "") << page;
  for (int page : {528, 1024, -16})
    EXPECT_EQ(problem_error(cache_problem(page, true, 528 * 48)),
              "page_size=" + std::to_string(page) +
                  " is not supported: expected 0 (contiguous K/V) or 1 to 512 rows (a multiple of "
                  "16 reads pages by TMA, others are gathered row by row)")
        << page;
  EXPECT_EQ(problem_error(cache_problem(64, true, 1000)),
            "seqlen_k=1000 is not a multiple of page_size=64: with a paged cache seqlen_k is the "
            "page table's width (pages per sequence) times page_size");
}

TEST(KvCacheValidation, BothForwardFamiliesServeACacheTheBackwardNone) {
  KernelConfig sm80{KernelPath::sm80, 128, 64, 4, 2};
  for (const Problem &p : {cache_problem(64), cache_problem(0, true)}) {
    auto spec = make_forward_spec(p, sm80, kSm80);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    EXPECT_EQ(spec->page_size, p.page_size);
    EXPECT_TRUE(spec->seqused_k);
    auto backward = make_backward_spec(p, sm80, kSm90a);
    ASSERT_FALSE(bool(backward));
    EXPECT_EQ(llvm::toString(backward.takeError()),
              "the backward takes no KV cache (seqused_k, page_size): a cache is an inference "
              "input; pass K and V as dense tensors of equal lengths, or a packed batch "
              "(varlen) with its key counts");
  }
}

// Fake, aligned device pointers: every check here stops before the driver.
const void *fake(uintptr_t address) { return reinterpret_cast<const void *>(address); }

ForwardArgs cache_args(const Problem &p) {
  ForwardArgs a = ForwardArgs::packed(p, fake(0x10000), fake(0x20000), fake(0x30000),
                                      const_cast<void *>(fake(0x40000)), nullptr);
  a.cache.cache_seqlens = static_cast<const int32_t *>(fake(0x50000));
  if (p.page_size > 0) {
    a.cache.page_table = static_cast<const int32_t *>(fake(0x60000));
    a.cache.page_table_stride = p.seqlen_k / p.page_size;
    a.cache.num_pages = p.batch * a.cache.page_table_stride;
    a.k_strides.batch = p.page_size * a.k_strides.seq;
    a.v_strides.batch = p.page_size * a.v_strides.seq;
  }
  return a;
}

std::string args_error(const Problem &p, const ForwardArgs &a) {
  return llvm::toString(validate_forward_args(p, a));
}

TEST(KvCacheValidation, CacheArgumentsAreCheckedBeforeTheDriver) {
  const Problem paged = cache_problem(64);
  {
    ForwardArgs a = cache_args(paged);
    a.cache.cache_seqlens = nullptr;
    EXPECT_EQ(args_error(paged, a),
              "cache.cache_seqlens is null: the problem has per-sequence key counts "
              "(seqused_k); pass an int32 [batch] device array");
  }
  {
    ForwardArgs a = cache_args(paged);
    a.cache.page_table = nullptr;
    EXPECT_EQ(args_error(paged, a),
              "cache.page_table is null: a paged cache (page_size=64) needs an int32 [batch, "
              "seqlen_k / page_size] device array");
  }
  {
    ForwardArgs a = cache_args(paged);
    a.cache.num_pages = 0;
    EXPECT_EQ(args_error(paged, a),
              "cache.num_pages=0 is invalid: a paged cache (page_size=64) needs 1 to 2^31-1 "
              "pages (K and V's first dimension)");
  }
  {
    ForwardArgs a = cache_args(paged);
    a.cache.page_table_stride = 10;  // the table is 64 wide
    EXPECT_EQ(args_error(paged, a),
              "cache.page_table_stride=10 is invalid: expected at least the table's width "
              "seqlen_k / page_size = 64 (rows must not overlap) and below 2^40");
  }
  {
    ForwardArgs a = cache_args(paged);
    a.cache.k_new = fake(0x70000);
    EXPECT_EQ(args_error(paged, a),
              "cache.k_new and cache.v_new: pass both (this step's keys and values) or neither");
    a.cache.v_new = fake(0x80000);
    a.cache.seqlen_new = 0;
    EXPECT_EQ(args_error(paged, a),
              "cache.seqlen_new=0 is invalid: expected 1 to seqlen_k=4096 new keys per sequence");
    a.cache.seqlen_new = 1;
    a.cache.k_new_strides = {8 * 128, 8 * 128, 128};
    a.cache.v_new_strides = {8 * 128, 8 * 128, 127};
    EXPECT_EQ(args_error(paged, a),
              "argument v_new: head stride 127 is not a multiple of 8 elements: the kernel uses "
              "16-byte vector loads, so every row must start 16-byte aligned");
  }
  {
    // Appending needs the positions.
    Problem p = cache_problem(64, /*seqused=*/false);
    ForwardArgs a = cache_args(p);
    a.cache.cache_seqlens = nullptr;
    a.cache.k_new = fake(0x70000);
    a.cache.v_new = fake(0x80000);
    a.cache.seqlen_new = 1;
    EXPECT_EQ(args_error(p, a),
              "cache.k_new/v_new need cache_seqlens (Problem::seqused_k): the new keys are "
              "written at each sequence's cache_seqlens");
  }
  {
    // Cache arguments for a problem without a cache are a mistake, not ignored.
    Problem dense = cache_problem(0, false);
    ForwardArgs a = cache_args(dense);
    EXPECT_EQ(args_error(dense, a),
              "cache arguments (cache_seqlens, page_table, k_new, v_new, cache_batch_idx, "
              "cache_leftpad) were given for a problem without a KV cache: set "
              "Problem::seqused_k (and page_size when paged)");
  }
  {
    // A contiguous cache's placement of the sequences: not with pages, and
    // a pool of entries needs its size.
    ForwardArgs a = cache_args(paged);
    a.cache.cache_leftpad = static_cast<const int32_t *>(fake(0x90000));
    EXPECT_EQ(args_error(paged, a),
              "cache.cache_leftpad was given for a paged cache: it places sequences in a "
              "contiguous cache [cache_batches, seqlen_k, heads_kv, d]; a page table already "
              "places each sequence's keys");
    Problem contiguous = cache_problem(0);
    ForwardArgs c = cache_args(contiguous);
    c.cache.cache_batch_idx = static_cast<const int32_t *>(fake(0x90000));
    EXPECT_EQ(args_error(contiguous, c),
              "cache.cache_batches=0 is invalid: cache_batch_idx needs K and V's number of "
              "batch entries, 1 to 2^31-1");
    c.cache.cache_batch_idx = nullptr;
    c.cache.cache_batches = 5;
    EXPECT_EQ(args_error(contiguous, c),
              "cache.cache_batches=5 without cache_batch_idx: pass the sequences' batch entries, "
              "or 0");
    Problem full = cache_problem(0, /*seqused=*/false);
    ForwardArgs f = cache_args(full);
    f.cache.cache_seqlens = nullptr;
    f.cache.cache_batch_idx = static_cast<const int32_t *>(fake(0x90000));
    f.cache.cache_batches = 5;
    EXPECT_NE(args_error(full, f).find("cache_batch_idx"), std::string::npos);
  }
  {
    // K and V of a pool are [cache_batches, seqlen_k, heads_kv, d]: a batch
    // stride that overlaps rows is the tensor check's error.
    Problem contiguous = cache_problem(0);
    ForwardArgs a = cache_args(contiguous);
    a.cache.cache_batch_idx = static_cast<const int32_t *>(fake(0x90000));
    a.cache.cache_batches = 9;
    EXPECT_EQ(forward_key_extent(contiguous, a).batch, 9);
    EXPECT_EQ(forward_key_extent(contiguous, a).rows, contiguous.seqlen_k);
    EXPECT_EQ(forward_key_extent(contiguous, cache_args(contiguous)).batch, contiguous.batch);
  }
  {
    // K and V are checked as [num_pages, page_size, heads_kv, d].
    ForwardArgs a = cache_args(paged);
    a.k_strides.seq = 12;
    EXPECT_EQ(args_error(paged, a).substr(0, 40), "argument k: seq stride 12 is not a multi");
  }
}

TEST(KvCacheLayout, BoxesNeverCrossAPage) {
  EXPECT_EQ(kv_box_rows(0, 128), 128);
  EXPECT_EQ(kv_box_rows(16, 128), 16);
  EXPECT_EQ(kv_box_rows(64, 64), 64);
  EXPECT_EQ(kv_box_rows(256, 64), 64);
  EXPECT_EQ(kv_box_rows(48, 64), 16);
  EXPECT_EQ(kv_box_rows(64, 80), 16);
  EXPECT_EQ(kv_box_rows(160, 80), 80);
  // The host twin gives the kernel's layout the page size.
  const FwdSm90Traits t{128, 64, 64, 8, 2, 4, 16};
  EXPECT_EQ(t.layout().kv_box_rows(), 16);
  EXPECT_EQ(t.smem_bytes(), (FwdSm90Traits{128, 64, 64, 8, 2, 4}.smem_bytes()));
}

TEST(KvCacheSource, IdPreludeAndEntriesNameTheCache) {
  auto spec = make_forward_spec(cache_problem(64), decode_tiles(), kSm90a);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  EXPECT_EQ(spec->id(), "fwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn64_w8_s2_gqa4_split_"
                        "seqused_page64_sm_90a");
  const GeneratedSource src = generate_forward(*spec);
  EXPECT_NE(src.source.find("constexpr bool kSeqUsedK = true;\n"), std::string::npos);
  EXPECT_NE(src.source.find("constexpr int kPageSize = 64;\n"), std::string::npos);
  EXPECT_NE(src.source.find("#include \"kv_append.cuh\"\n"), std::string::npos);
  EXPECT_EQ(src.entries, (std::vector<std::string>{"flashjit_fwd_sm90", "flashjit_fwd_combine",
                                                   "flashjit_kv_append"}));
  // Pages without per-sequence counts: no append kernel.
  auto full = make_forward_spec(cache_problem(64, false), decode_tiles(), kSm90a);
  ASSERT_TRUE(bool(full));
  EXPECT_EQ(generate_forward(*full).entries,
            (std::vector<std::string>{"flashjit_fwd_sm90", "flashjit_fwd_combine"}));
  // A dense problem's program is what it was.
  auto dense = make_forward_spec(cache_problem(0, false), decode_tiles(), kSm90a);
  ASSERT_TRUE(bool(dense));
  EXPECT_NE(generate_forward(*dense).source.find("constexpr int kPageSize = 0;\n"),
            std::string::npos);
  EXPECT_EQ(dense->id().find("page"), std::string::npos);
}

TEST(KvCacheHeuristic, ShuffledPagesGetMoreBytesInFlight) {
  // Decode at d=128: contiguous 64 x 2; pages of 32 rows and more 64 x 4;
  // pages of 16 rows 128 x 3 (docs/PERF.md).
  auto tiles = [](int page) {
    const KernelConfig c = default_forward_config(cache_problem(page), kSm90a, 0, {}, 132);
    return std::tuple{c.path, c.block_m, c.block_n, c.stages};
  };
  EXPECT_EQ(tiles(0), std::tuple(KernelPath::sm90, 64, 64, 2));
  EXPECT_EQ(tiles(16), std::tuple(KernelPath::sm90, 64, 128, 3));
  EXPECT_EQ(tiles(32), std::tuple(KernelPath::sm90, 64, 64, 4));
  EXPECT_EQ(tiles(256), std::tuple(KernelPath::sm90, 64, 64, 4));
  // Each is a valid kernel on sm_90a.
  for (int page : {16, 32, 64, 256}) {
    const Problem p = cache_problem(page);
    EXPECT_TRUE(bool(make_forward_spec(p, default_forward_config(p, kSm90a, 0, {}, 132), kSm90a)))
        << page;
  }
}

// An explicit sm90 request whose tiles cannot work is refused as sm90, never
// turned into an sm80 config the caller did not ask for.
TEST(KvCacheHeuristic, AnExplicitSm90RequestStaysSm90) {
  KernelConfig partial;
  partial.path = KernelPath::sm90;
  partial.stages = 6;
  const KernelConfig c = default_forward_config(cache_problem(0, false), kSm90a, 0, partial, 132);
  EXPECT_EQ(c.path, KernelPath::sm90);
  auto spec = make_forward_spec(cache_problem(0, false), c, kSm90a);
  ASSERT_FALSE(bool(spec));
  const std::string error = llvm::toString(spec.takeError());
  EXPECT_NE(error.find("stages=6"), std::string::npos) << error;
  EXPECT_EQ(error.find("sm80"), std::string::npos) << error;
}

TEST(KvCacheHeuristic, PagesOfPartialBoxesAreGatheredBySm80) {
  for (int page : {1, 4, 24, 40}) {
    const Problem p = cache_problem(page, true, page * 64);
    const KernelConfig c = default_forward_config(p, kSm90a, 0, {}, 132);
    EXPECT_EQ(c.path, KernelPath::sm80) << page;
    auto spec = make_forward_spec(p, c, kSm90a);
    ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
    EXPECT_NE(spec->id().find("_page" + std::to_string(page) + "_"), std::string::npos);
    KernelConfig sm90{KernelPath::sm90, 64, 64, 8, 2};
    auto refused = make_forward_spec(p, sm90, kSm90a);
    ASSERT_FALSE(bool(refused));
    EXPECT_EQ(llvm::toString(refused.takeError()),
              "kernel path sm90 is not available: its TMA reads pages of whole 16-row boxes, and "
              "page_size=" + std::to_string(page) +
                  " is not a multiple of 16 (the sm80 family gathers such pages row by row); "
                  "use sm80");
  }
  EXPECT_EQ(problem_class_key(cache_problem(1)).kv_layout, "paged1");
}

TEST(KvCacheKeys, CallKeyAndTuningClassSeparateLayouts) {
  const Problem dense = cache_problem(0, false);
  const Problem paged = cache_problem(64);
  EXPECT_FALSE(CallKey::make(1, dense, {}) == CallKey::make(1, paged, {}));
  EXPECT_EQ(problem_class_key(dense).kv_layout, "contiguous");
  EXPECT_EQ(problem_class_key(paged).kv_layout, "paged64");
  EXPECT_EQ(problem_class_key(cache_problem(0, true)).kv_layout, "contiguous");
}

TEST(KvCacheCompile, PagedKernelsAndTheAppendCompileWithoutSpills) {
  struct Variant {
    int d, page;
    bool seqused;
    int block_m, block_n, stages;
    MaskKind mask;
  };
  const Variant variants[] = {
      {128, 16, true, 64, 64, 2, MaskKind::none},   {128, 64, true, 64, 64, 2, MaskKind::causal},
      {64, 256, true, 64, 128, 3, MaskKind::none},  {256, 64, true, 64, 80, 2, MaskKind::window},
      {128, 48, false, 128, 128, 2, MaskKind::causal}, {128, 0, true, 64, 64, 2, MaskKind::none},
  };
  const auto compiled = testing::compile_forward_variants(
      std::size(variants),
      [&](size_t i) {
        const Variant &v = variants[i];
        Problem p = cache_problem(v.page, v.seqused, 48 * 256, v.d);
        p.mask = v.mask;
        p.window_left = 100;
        p.window_right = 0;
        KernelConfig c{KernelPath::sm90, v.block_m, v.block_n,
                       FwdSm90Traits::warps_for(v.block_m), v.stages};
        c.splits = 3;
        c.pack_gqa = GqaPacking::on;
        return make_forward_spec(p, c, kSm90a);
      },
      kSm90a);
  for (size_t i = 0; i < compiled.size(); ++i) {
    testing::expect_clean(compiled[i], {"flashjit_fwd_sm90"});
    if (!compiled[i].result.cubin) continue;
    const std::string bytes(compiled[i].result.cubin->bytes.begin(),
                            compiled[i].result.cubin->bytes.end());
    EXPECT_EQ(bytes.find("flashjit_kv_append") != std::string::npos, variants[i].seqused)
        << compiled[i].id;
  }
}

// The sm80 family's split-KV and KV-cache variants (cp.async gathers of
// page pieces) compile for sm_80 with ptxas's report and no spills, every
// entry in the cubin.
TEST(KvCacheCompile, Sm80SplitAndPagedKernelsCompileWithoutSpills) {
  struct Variant {
    int d, page;
    bool seqused;
    KernelConfig tiles;
    int splits;
  };
  const Variant variants[] = {
      // 16 query rows a warp: the tiles a decode step takes (32 rows a warp
      // spill a few bytes with or without a cache, which the tuner allows).
      {128, 16, true, {KernelPath::sm80, 64, 64, 4, 2}, 4},
      {128, 64, true, {KernelPath::sm80, 64, 64, 4, 2}, 1},
      {72, 48, true, {KernelPath::sm80, 128, 32, 8, 3}, 3},   // padded head dim, 16-row pieces
      {256, 256, false, {KernelPath::sm80, 64, 32, 4, 2}, 2},
      {64, 0, true, {KernelPath::sm80, 128, 128, 8, 2}, 5},
      {96, 0, false, {KernelPath::sm80, 64, 64, 4, 2}, 3},   // split only
      // Pages that are not whole 16-row runs: the row gather.
      {128, 1, true, {KernelPath::sm80, 64, 64, 4, 2}, 4},
      {64, 24, true, {KernelPath::sm80, 128, 64, 4, 2}, 1},
      {128, 3, false, {KernelPath::sm80, 64, 128, 4, 2}, 2},
  };
  const auto compiled = testing::compile_forward_variants(
      std::size(variants),
      [&](size_t i) {
        const Variant &v = variants[i];
        Problem p = cache_problem(v.page, v.seqused, 48 * 256, v.d);
        p.mask = i % 2 ? MaskKind::causal : MaskKind::none;
        KernelConfig c = v.tiles;
        c.splits = v.splits;
        c.pack_gqa = GqaPacking::off;
        return make_forward_spec(p, c, kSm80);
      },
      kSm80);
  for (size_t i = 0; i < compiled.size(); ++i) {
    // The main kernel, the combine where it splits, the append where it
    // appends.
    testing::expect_clean(compiled[i], {"flashjit_fwd_sm80"});
    if (!compiled[i].result.cubin) continue;
    const std::string bytes(compiled[i].result.cubin->bytes.begin(),
                            compiled[i].result.cubin->bytes.end());
    EXPECT_EQ(bytes.find("flashjit_fwd_combine") != std::string::npos, variants[i].splits > 1)
        << compiled[i].id;
    EXPECT_EQ(bytes.find("flashjit_kv_append") != std::string::npos, variants[i].seqused)
        << compiled[i].id;
  }
}

}  // namespace
}  // namespace flashjit
