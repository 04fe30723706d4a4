// A caller's block mask (flashjit::BlockMask, FlexAttention's layout)
// without a GPU: every field is checked before any GPU work, with a message
// naming it and what it should be, through the C++ API (forward and
// backward) and the C API; the scatter kernel is in both sm90 programs and
// compiles cleanly; the grid sits after the map's kinds in one workspace.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "flashjit/backward.h"
#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "generator/block_map.h"
#include "generator/block_mask_builder.h"
#include "runtime/nvrtc_compiler.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "sm90_compile_check.h"

namespace flashjit {
namespace {

const TargetArch kSm90a{9, 0, true};

const char *kDocuments =
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  return aux.doc_ids[q] == aux.doc_ids[k];\n"
    "}\n";

Modifiers documents() {
  Modifiers m;
  m.mask_mod = kDocuments;
  m.aux = {{"const int*", "doc_ids"}};
  return m;
}

// 2 x 16 heads, 1000 queries and 3000 keys: 8 x 24 blocks of 128.
Problem problem() {
  Problem p;
  p.batch = 2;
  p.heads_q = 16;
  p.heads_kv = 4;
  p.seqlen_q = 1000;
  p.seqlen_k = 3000;
  return p;
}

// A mask the checks accept for problem(): pointers that are never read
// (the checks come before any GPU work).
BlockMask valid_mask() {
  static const int fake[1] = {0};
  BlockMask m;
  m.batches = 2;
  m.heads = 1;
  m.q_blocks = 8;
  m.k_blocks = 24;
  m.kv_num_blocks = m.kv_indices = fake;
  return m;
}

std::string forward_error(const Problem &p, const Modifiers *modifiers, const BlockMask &mask) {
  ForwardArgs args = ForwardArgs::packed(p, nullptr, nullptr, nullptr, nullptr, nullptr);
  args.modifiers = modifiers;
  const long long doc_ids = 0;  // a null device pointer: never read
  args.aux = modifiers && !modifiers->aux.empty() ? &doc_ids : nullptr;
  args.aux_bytes = args.aux ? 8 : 0;
  args.block_mask = &mask;
  return forward(p, args).message();
}

TEST(BlockMask, EveryFieldIsCheckedBeforeAnyGpuWork) {
  const Problem p = problem();
  const Modifiers m = documents();
  const std::string prefix = "flashjit forward (" + describe(p) + "): argument block_mask: ";
  struct Case {
    void (*change)(BlockMask &);
    std::string message;
  };
  const Case cases[] = {
      {[](BlockMask &b) { b.block_k = 0; }, "block sizes 128 x 0: both must be positive"},
      {[](BlockMask &b) { b.batches = 3; },
       "batches=3: expected 1 (one mask for every sequence) or the problem's batch, 2"},
      {[](BlockMask &b) { b.heads = 4; },
       "heads=4: expected 1 (one mask for every head) or the problem's heads_q, 16"},
      {[](BlockMask &b) { b.k_blocks = 23; },
       "8 x 23 blocks of 128 x 128: seqlen_q=1000 and seqlen_k=3000 take 8 x 24; build the "
       "mask for this call's lengths"},
      {[](BlockMask &b) { b.block_q = 64; },
       "8 x 24 blocks of 64 x 128: seqlen_q=1000 and seqlen_k=3000 take 16 x 24; build the "
       "mask for this call's lengths"},
      {[](BlockMask &b) { b.kv_indices = nullptr; },
       "kv_num_blocks and kv_indices must both be device pointers (the partial blocks; an "
       "empty list is a count of 0)"},
      {[](BlockMask &b) { b.full_kv_num_blocks = b.kv_num_blocks; },
       "full_kv_num_blocks and full_kv_indices: give both (the full blocks) or neither"},
  };
  for (const Case &c : cases) {
    BlockMask mask = valid_mask();
    c.change(mask);
    EXPECT_EQ(forward_error(p, &m, mask), prefix + c.message);
  }
  // Without the mask_mod it describes.
  EXPECT_EQ(forward_error(p, nullptr, valid_mask()),
            prefix + "given without a mask_mod; a block mask only says which tiles a mask_mod "
                     "hides or shows whole: pass the mask_mod it was built from");
  // Too many blocks to index with an int.
  Problem huge = p;
  huge.seqlen_q = huge.seqlen_k = 1 << 20;
  BlockMask big = valid_mask();
  big.heads = 16;
  big.block_q = big.block_k = 16;
  big.q_blocks = big.k_blocks = 65536;
  EXPECT_EQ(forward_error(huge, &m, big),
            "flashjit forward (" + describe(huge) +
                "): argument block_mask: 2 x 16 x 65536 x 65536 blocks, 2^31 or more: use larger "
                "blocks, or one mask for every batch and head");
  // A valid mask passes these checks: the call fails later, at the tensors.
  EXPECT_EQ(forward_error(p, &m, valid_mask()).find("block_mask"), std::string::npos);
}

TEST(BlockMask, TheBackwardChecksItToo) {
  const Problem p = problem();
  const Modifiers m = documents();
  BlockMask mask = valid_mask();
  mask.heads = 5;
  BackwardArgs args = BackwardArgs::packed(p, nullptr, nullptr, nullptr, nullptr, nullptr,
                                           nullptr, nullptr, nullptr, nullptr, nullptr, 0);
  const long long doc_ids = 0;
  args.modifiers = &m;
  args.aux = &doc_ids;
  args.aux_bytes = 8;
  args.block_mask = &mask;
  EXPECT_EQ(backward(p, args).message(),
            "flashjit backward (" + describe(p) +
                "): argument block_mask: heads=5: expected 1 (one mask for every head) or the "
                "problem's heads_q, 16");
}

TEST(BlockMask, TheCApiPassesItThrough) {
  flashjit_problem problem{};
  problem.dtype = FLASHJIT_BF16;
  problem.head_dim_qk = problem.head_dim_v = 128;
  problem.batch = 2;
  problem.heads_q = 16;
  problem.heads_kv = 4;
  problem.seqlen_q = 1000;
  problem.seqlen_k = 3000;
  problem.softmax_scale = 0.125f;
  flashjit_forward_args args{};
  static const int fake[1] = {0};
  flashjit_block_mask mask{};
  mask.block_q = mask.block_k = 128;
  mask.batches = mask.heads = 1;
  mask.q_blocks = 8;
  mask.k_blocks = 25;
  mask.kv_num_blocks = mask.kv_indices = fake;
  flashjit_aux_value doc_ids{};
  doc_ids.name = "doc_ids";
  doc_ids.kind = FLASHJIT_AUX_POINTER;
  flashjit_modifiers modifiers{};
  modifiers.mask_mod = kDocuments;
  modifiers.aux = "const int* doc_ids";
  modifiers.aux_values = &doc_ids;
  modifiers.aux_count = 1;
  modifiers.block_mask = &mask;
  EXPECT_NE(flashjit_forward_modified(&problem, &args, &modifiers, nullptr, nullptr), 0);
  EXPECT_NE(std::string(flashjit_last_error())
                .find("argument block_mask: 8 x 25 blocks of 128 x 128: seqlen_q=1000 and "
                      "seqlen_k=3000 take 8 x 24"),
            std::string::npos)
      << flashjit_last_error();
}

// The scatter kernel is an entry of both sm90 programs with a mask_mod, and
// it and the kinds kernels (which read its grid) compile without spills;
// the grid follows the kinds at a 256-byte boundary.
TEST(BlockMask, BothProgramsScatterItAndCompileCleanly) {
  Problem p = problem();
  p.mask = MaskKind::causal;
  const Modifiers m = documents();
  auto spec = make_forward_spec(p, default_forward_config(p, kSm90a, 0, {}, 132), kSm90a);
  ASSERT_TRUE(static_cast<bool>(spec)) << llvm::toString(spec.takeError());
  spec->modifiers = m;
  const GeneratedSource forward_program = generate_forward(*spec);
  EXPECT_NE(std::find(forward_program.entries.begin(), forward_program.entries.end(),
                      "flashjit_block_mask_grid"),
            forward_program.entries.end());
  const auto compiled = testing::compile_forward_variants(
      1, [&](size_t) -> llvm::Expected<KernelSpec> { return *spec; }, kSm90a);
  testing::expect_clean(compiled[0], {"flashjit_fwd_block_kinds", "flashjit_block_mask_grid"});

  const BlockMapGeometry map = forward_block_map_geometry(*spec, p);
  EXPECT_EQ(map.grid_offset() % 256, 0u);
  EXPECT_GE(map.grid_offset(), map.workspace_bytes());
  BlockMask mask = valid_mask();
  EXPECT_EQ(block_mask_grid_bytes(mask), 2u * 8 * 24);
  const LaunchGeometry scatter = BlockMapGeometry::grid_launch(16);
  EXPECT_EQ(scatter.grid.x * scatter.block.x, 16u * 32);
}

// flashjit::create_block_mask's program compiles for both targets with its
// two kernels, keyed by the mask alone; bad requests are refused before any
// GPU work (this machine has none), through the C API too.
TEST(BlockMask, CreateBlockMaskCompilesAndChecksItsRequest) {
  Modifiers m = documents();
  for (const TargetArch &arch : {TargetArch{8, 0, false}, kSm90a}) {
    auto cubin = compile_to_cubin(generate_block_mask_builder(m), arch);
    ASSERT_TRUE(bool(cubin)) << arch.name() << ": " << llvm::toString(cubin.takeError());
    const std::string bytes(cubin->bytes.begin(), cubin->bytes.end());
    EXPECT_NE(bytes.find("flashjit_block_mask_kinds"), std::string::npos);
    EXPECT_NE(bytes.find("flashjit_block_mask_lists"), std::string::npos);
  }
  Modifiers scored = m;
  scored.score_mod =
      "__device__ float score_mod(float s, int b, int h, int q, int k, const Aux &aux) "
      "{ return s; }\n";
  EXPECT_EQ(generate_block_mask_builder(scored).source, generate_block_mask_builder(m).source);

  static const int fake[1] = {0};
  BlockMask out = valid_mask();
  out.full_kv_num_blocks = out.full_kv_indices = fake;
  const long long doc_ids = 0;  // a null device pointer: never read
  auto build_error = [&](const Modifiers &mods, const BlockMask &mask, Problem p = problem()) {
    return create_block_mask(p, mods, &doc_ids, 8, mask).message();
  };
  // A mask per (batch, head) asked for: the problem's batches and heads.
  // (Left to the probe, the same check follows it, on the GPU.)
  m.mask_mod_qk_only = MaskModQkOnly::off;
  EXPECT_EQ(build_error(m, out),
            "create_block_mask: batches=2, heads=1: a mask_mod that may read b or h "
            "(mask_mod_qk_only off: given, or found by the probe) needs the problem's, 2 and 16; "
            "one mask of every batch and head needs a mask_mod of q and k alone");
  BlockMask no_full = out;
  no_full.full_kv_indices = nullptr;
  no_full.full_kv_num_blocks = nullptr;
  m.mask_mod_qk_only = MaskModQkOnly::on;
  EXPECT_EQ(build_error(m, no_full),
            "create_block_mask: full_kv_num_blocks and full_kv_indices must be device pointers: "
            "the blocks mask_mod shows whole are written there");
  BlockMask short_rows = out;
  short_rows.k_blocks = 23;
  EXPECT_EQ(build_error(m, short_rows),
            "argument block_mask: 8 x 23 blocks of 128 x 128: seqlen_q=1000 and seqlen_k=3000 "
            "take 8 x 24; build the mask for this call's lengths");
  EXPECT_EQ(build_error(Modifiers{}, out),
            "create_block_mask: the modifiers have no mask_mod to build the mask of");
  Problem varlen = problem();
  varlen.varlen = true;
  EXPECT_EQ(build_error(m, out, varlen),
            "create_block_mask: a packed batch (varlen) has no block mask of FlexAttention's "
            "layout; its calls build their own block map");

  // The C API: the same checks, and its own arguments'.
  flashjit_problem cp{};
  cp.dtype = FLASHJIT_BF16;
  cp.head_dim_qk = cp.head_dim_v = 64;
  cp.batch = 2;
  cp.heads_q = cp.heads_kv = 16;
  cp.seqlen_q = 1000;
  cp.seqlen_k = 3000;
  flashjit_block_mask cout{};
  cout.block_q = cout.block_k = 128;
  cout.batches = cout.heads = 1;
  cout.q_blocks = 8;
  cout.k_blocks = 24;
  cout.kv_num_blocks = cout.kv_indices = cout.full_kv_num_blocks = cout.full_kv_indices = fake;
  flashjit_aux_value doc_value{};
  doc_value.name = "doc_ids";
  doc_value.kind = FLASHJIT_AUX_POINTER;
  flashjit_modifiers cm{};
  cm.mask_mod = kDocuments;
  cm.aux = "const int* doc_ids";
  cm.aux_values = &doc_value;
  cm.aux_count = 1;
  cm.mask_mod_qk_only = FLASHJIT_MASK_MOD_QK_ONLY_OFF;
  EXPECT_NE(flashjit_create_block_mask(&cp, &cm, &cout, nullptr), 0);
  EXPECT_EQ(std::string(flashjit_last_error()),
            "flashjit_create_block_mask: create_block_mask: batches=1, heads=1: a mask_mod that "
            "may read b or h (mask_mod_qk_only off: given, or found by the probe) needs the "
            "problem's, 2 and 16; one mask of every batch and head needs a mask_mod of q and k "
            "alone");
  cm.mask_mod_qk_only = 3;
  EXPECT_NE(flashjit_create_block_mask(&cp, &cm, &cout, nullptr), 0);
  EXPECT_EQ(std::string(flashjit_last_error()),
            "flashjit_create_block_mask: mask_mod_qk_only is 3: expected "
            "FLASHJIT_MASK_MOD_QK_ONLY_AUTO (0), FLASHJIT_MASK_MOD_QK_ONLY_ON (1) or "
            "FLASHJIT_MASK_MOD_QK_ONLY_OFF (2)");
  cm.mask_mod_qk_only = FLASHJIT_MASK_MOD_QK_ONLY_OFF;
  cm.block_mask = &cout;
  EXPECT_NE(flashjit_create_block_mask(&cp, &cm, &cout, nullptr), 0);
  EXPECT_EQ(std::string(flashjit_last_error()),
            "flashjit_create_block_mask: modifiers->block_mask is set: it is what this builds, "
            "give it as out");
  EXPECT_NE(flashjit_create_block_mask(&cp, &cm, nullptr, nullptr), 0);
  EXPECT_EQ(std::string(flashjit_last_error()),
            "flashjit_create_block_mask: out is NULL: it describes the arrays to fill");
}

}  // namespace
}  // namespace flashjit
