// The bad-input corpus: one table per boundary that runs without a
// GPU, one row per distinct bad input, each with the exact message it must
// give. Nothing may crash, no check may be skipped for a driver call (the
// layout checks run before the driver is needed, so these rows give the same
// message with or without a GPU), and a database is byte-for-byte unchanged
// by anything refused. The number of cases is printed and must be >= 60.
#include <gtest/gtest.h>

#include "c_api_test_util.h"

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "cache/base64.h"
#include "cache/tuning_db.h"
#include "cli_runner.h"
#include "flashjit/backward.h"
#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "runtime/nvrtc_compiler.h"
#include "tuner/cubin_reproduction.h"
#include "tuner/plan.h"
#include "tuning_db_test_util.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SHA256.h"

namespace flashjit {
namespace {

using namespace testing_db;
using namespace testing_cli;

// Cases tried, per boundary; the last test checks the total.
struct Counts {
  int cxx = 0, c_api = 0, cli = 0, plan = 0, db_import = 0, db_open = 0, db_trust = 0,
      db_verify = 0;
  int total() const {
    return cxx + c_api + cli + plan + db_import + db_open + db_trust + db_verify;
  }
};
Counts &counts() {
  static Counts c;
  return c;
}

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// ---- (a) the C++ API ---------------------------------------------------------

Problem base_problem() {
  Problem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.seqlen_q = 100;
  p.seqlen_k = 300;
  p.head_dim_qk = 128;
  p.head_dim_v = 64;
  return p;
}

// Aligned and never dereferenced: every row here stops before the driver.
void *fake(uintptr_t address) { return reinterpret_cast<void *>(address); }

ForwardArgs forward_args(const Problem &p) {
  return ForwardArgs::packed(p, fake(0x10000), fake(0x20000), fake(0x30000), fake(0x40000),
                             static_cast<float *>(fake(0x50000)));
}

BackwardArgs backward_args(const Problem &p) {
  return BackwardArgs::packed(p, fake(0x10000), fake(0x20000), fake(0x30000), fake(0x40000),
                              fake(0x50000), static_cast<const float *>(fake(0x60000)),
                              fake(0x70000), fake(0x80000), fake(0x90000), fake(0xa0000),
                              backward_workspace_bytes(p));
}

struct ProblemCase {
  const char *what;
  std::function<void(Problem &)> edit;
  std::string message;  // after "flashjit <pass> (<problem>): "
};

const std::vector<ProblemCase> &problem_cases() {
  static const std::vector<ProblemCase> cases = {
      {"batch 0", [](Problem &p) { p.batch = 0; },
       "batch=0 is out of range: expected 1 to 2147483647"},
      {"negative batch", [](Problem &p) { p.batch = -3; },
       "batch=-3 is out of range: expected 1 to 2147483647"},
      {"heads_q 0", [](Problem &p) { p.heads_q = 0; },
       "heads_q=0 is out of range: expected 1 to 2147483647"},
      {"negative heads_kv", [](Problem &p) { p.heads_kv = -1; },
       "heads_kv=-1 is out of range: expected 1 to 2147483647"},
      {"seqlen_q 0", [](Problem &p) { p.seqlen_q = 0; },
       "seqlen_q=0 is out of range: expected 1 to 2147483647"},
      {"seqlen_k 2^31", [](Problem &p) { p.seqlen_k = kMaxInt + 1; },
       "seqlen_k=2147483648 is out of range: expected 1 to 2147483647"},
      {"heads_q not a multiple", [](Problem &p) { p.heads_kv = 3; },
       "heads_q=8 is not a multiple of heads_kv=3 (GQA/MQA need whole groups)"},
      {"heads_kv above heads_q",
       [](Problem &p) {
         p.heads_q = 2;
         p.heads_kv = 4;
       },
       "heads_q=2 is not a multiple of heads_kv=4 (GQA/MQA need whole groups)"},
      {"batch past the grid", [](Problem &p) { p.batch = 70000; },
       "heads_q=8, batch=70000: each must be at most 65535 (grid dimensions)"},
      {"batch*heads past the grid",
       [](Problem &p) {
         p.batch = p.heads_q = p.heads_kv = kMaxInt;
       },
       "batch*heads_q=4611686014132420609 exceeds the grid"},
      {"rows overflow (query side)",
       [](Problem &p) {
         p.batch = p.heads_q = 65535;
         p.heads_kv = 1;
         p.seqlen_q = kMaxInt;
       },
       "batch*heads_q*seqlen_q=65535*65535*2147483647 rows is too large: the tensors' byte "
       "offsets would overflow 64 bits"},
      {"rows overflow (key side)",
       [](Problem &p) {
         p.batch = p.heads_q = p.heads_kv = 65535;
         p.seqlen_q = 1;
         p.seqlen_k = kMaxInt;
       },
       "batch*heads_kv*seqlen_k=65535*65535*2147483647 rows is too large: the tensors' byte "
       "offsets would overflow 64 bits"},
      {"query tiles past 32 bits",
       [](Problem &p) {
         p.batch = p.heads_q = p.heads_kv = 65535;
         p.seqlen_q = 1 << 20;
       },
       "batch*heads_q*ceil(seqlen_q/128)=35183298355200 query tiles exceed 2147483647 (kernels "
       "number them in 32 bits)"},
      {"head_dim_qk 0", [](Problem &p) { p.head_dim_qk = 0; },
       "head_dim_qk=0 is not supported: expected a multiple of 8 in [8, 576] (pad other sizes; "
       "the Python binding does this for you)"},
      {"head_dim_qk 100", [](Problem &p) { p.head_dim_qk = 100; },
       "head_dim_qk=100 is not supported: expected a multiple of 8 in [8, 576] (pad other sizes; "
       "the Python binding does this for you)"},
      {"negative head_dim_qk", [](Problem &p) { p.head_dim_qk = -8; },
       "head_dim_qk=-8 is not supported: expected a multiple of 8 in [8, 576] (pad other sizes; "
       "the Python binding does this for you)"},
      {"head_dim_v 584", [](Problem &p) { p.head_dim_v = 584; },
       "head_dim_v=584 is not supported: expected a multiple of 8 in [8, 576] (pad other sizes; "
       "the Python binding does this for you)"},
      {"dtype out of range", [](Problem &p) { p.dtype = static_cast<DType>(5); },
       "dtype=5 is not bf16, fp16 or e4m3"},
      {"mask out of range", [](Problem &p) { p.mask = static_cast<MaskKind>(7); },
       "mask=7 is not none, causal or window"},
      {"window left -2",
       [](Problem &p) {
         p.mask = MaskKind::window;
         p.window_left = -2;
         p.window_right = 0;
       },
       "window=(-2,0) is invalid: each bound is -1 (unbounded) or >= 0"},
      {"window right -5",
       [](Problem &p) {
         p.mask = MaskKind::window;
         p.window_left = 16;
         p.window_right = -5;
       },
       "window=(16,-5) is invalid: each bound is -1 (unbounded) or >= 0"},
      {"NaN scale", [](Problem &p) { p.softmax_scale = kNaN; },
       "softmax_scale=nan is invalid: expected a finite value > 0 (or 0 for 1/sqrt(d))"},
      {"negative scale", [](Problem &p) { p.softmax_scale = -0.5f; },
       "softmax_scale=-0.50 is invalid: expected a finite value > 0 (or 0 for 1/sqrt(d))"},
      {"infinite scale", [](Problem &p) { p.softmax_scale = kInf; },
       "softmax_scale=INF is invalid: expected a finite value > 0 (or 0 for 1/sqrt(d))"},
      {"NaN softcap", [](Problem &p) { p.softcap = kNaN; },
       "softcap=nan is invalid: expected a finite value > 0 (or 0 for off)"},
      {"negative softcap", [](Problem &p) { p.softcap = -30.f; },
       "softcap=-30.00 is invalid: expected a finite value > 0 (or 0 for off)"},
  };
  return cases;
}

TEST(BadInputCorpus, ForwardRejectsBadProblems) {
  for (const ProblemCase &c : problem_cases()) {
    Problem p = base_problem();
    c.edit(p);
    const Status status = forward(p, forward_args(p));
    ASSERT_FALSE(status.ok()) << c.what;
    EXPECT_EQ(status.message(), "flashjit forward (" + describe(p) + "): " + c.message) << c.what;
    ++counts().cxx;
  }
}

// The same problems through the backward: each must be refused before the
// workspace size (which the overflowing ones would wrap) is even compared.
TEST(BadInputCorpus, BackwardRejectsBadProblems) {
  for (const ProblemCase &c : problem_cases()) {
    Problem p = base_problem();
    c.edit(p);
    BackwardArgs args = backward_args(base_problem());
    args.workspace_bytes = 16;
    const Status status = backward(p, args);
    ASSERT_FALSE(status.ok()) << c.what;
    EXPECT_EQ(status.message(), "flashjit backward (" + describe(p) + "): " + c.message)
        << c.what;
    ++counts().cxx;
  }
}

TEST(BadInputCorpus, DescribeIsPartOfTheMessage) {
  Problem p = base_problem();
  p.heads_kv = 3;
  EXPECT_EQ(forward(p, forward_args(p)).message(),
            "flashjit forward (bf16 b=2 hq=8 hkv=3 sq=100 sk=300 d=128 dv=64 none): heads_q=8 is "
            "not a multiple of heads_kv=3 (GQA/MQA need whole groups)");
}

TEST(BadInputCorpus, ForwardRejectsBadArguments) {
  const Problem p = base_problem();
  struct Case {
    const char *what;
    std::function<void(ForwardArgs &)> edit;
    std::string message;
  };
  const Case cases[] = {
      {"null q", [](ForwardArgs &a) { a.q = nullptr; }, "argument q is null"},
      {"null k", [](ForwardArgs &a) { a.k = nullptr; }, "argument k is null"},
      {"null o", [](ForwardArgs &a) { a.o = nullptr; }, "argument o is null"},
      {"q off by 8 bytes", [](ForwardArgs &a) { a.q = fake(0x10008); },
       "argument q (0x0000000000010008) is not 16-byte aligned: the kernel uses 16-byte vector "
       "loads"},
      {"o off by 2 bytes", [](ForwardArgs &a) { a.o = fake(0x40002); },
       "argument o (0x0000000000040002) is not 16-byte aligned: the kernel uses 16-byte vector "
       "loads"},
      {"lse off by 2 bytes", [](ForwardArgs &a) { a.lse = static_cast<float *>(fake(0x50002)); },
       "argument lse (0x0000000000050002) is not 4-byte aligned"},
      {"negative batch stride", [](ForwardArgs &a) { a.k_strides.batch = -76800; },
       "argument k: batch stride -76800 is negative; strides must be >= 0 (the last dimension, "
       "head_dim, is assumed contiguous)"},
      {"negative head stride", [](ForwardArgs &a) { a.v_strides.head = -64; },
       "argument v: head stride -64 is negative; strides must be >= 0 (the last dimension, "
       "head_dim, is assumed contiguous)"},
      {"seq stride 1028", [](ForwardArgs &a) { a.q_strides.seq = 1028; },
       "argument q: seq stride 1028 is not a multiple of 8 elements: the kernel uses 16-byte "
       "vector loads, so every row must start 16-byte aligned"},
      {"batch stride 4", [](ForwardArgs &a) { a.o_strides.batch = 4; },
       "argument o: batch stride 4 is not a multiple of 8 elements: the kernel uses 16-byte "
       "vector loads, so every row must start 16-byte aligned"},
      {"strides past 2^62 elements",
       [](ForwardArgs &a) { a.q_strides.batch = int64_t(1) << 62; },
       "argument q: strides (batch 4611686018427387904, seq 1024, head 128) over [batch=2, "
       "seqlen=100, heads=8] reach past 2^62 elements: byte offsets would overflow 64 bits"},
      {"stride times extent overflows",
       [](ForwardArgs &a) { a.k_strides.seq = int64_t(1) << 61; },
       "argument k: strides (batch 76800, seq 2305843009213693952, head 128) over [batch=2, "
       "seqlen=300, heads=2] reach past 2^62 elements: byte offsets would overflow 64 bits"},
  };
  for (const Case &c : cases) {
    ForwardArgs args = forward_args(p);
    c.edit(args);
    const Status status = forward(p, args);
    ASSERT_FALSE(status.ok()) << c.what;
    EXPECT_EQ(status.message(), "flashjit forward (" + describe(p) + "): " + c.message) << c.what;
    ++counts().cxx;
  }
}

TEST(BadInputCorpus, BackwardRejectsBadArguments) {
  const Problem p = base_problem();
  const size_t needed = backward_workspace_bytes(p);
  // dQ accumulator, D, semaphores, work counter
  ASSERT_EQ(needed, size_t(2 * 8 * 100 * 130 * 4 + 4));
  struct Case {
    const char *what;
    std::function<void(BackwardArgs &)> edit;
    std::string message;
  };
  const Case cases[] = {
      {"workspace one byte short", [&](BackwardArgs &a) { a.workspace_bytes = needed - 1; },
       "argument workspace: 832003 bytes given, 832004 needed (backward_workspace_bytes)"},
      {"no workspace at all",
       [](BackwardArgs &a) {
         a.workspace = nullptr;
         a.workspace_bytes = 0;
       },
       "argument workspace: 0 bytes given, 832004 needed (backward_workspace_bytes)"},
      {"null workspace of the right size", [](BackwardArgs &a) { a.workspace = nullptr; },
       "argument workspace is null"},
      {"workspace off by 8 bytes", [](BackwardArgs &a) { a.workspace = fake(0xa0008); },
       "argument workspace (0x00000000000A0008) is not 16-byte aligned"},
      {"null lse", [](BackwardArgs &a) { a.lse = nullptr; }, "argument lse is null"},
      {"lse off by 2 bytes",
       [](BackwardArgs &a) { a.lse = static_cast<const float *>(fake(0x60002)); },
       "argument lse (0x0000000000060002) is not 4-byte aligned"},
      {"null dout", [](BackwardArgs &a) { a.dout = nullptr; }, "argument dout is null"},
      {"null dv", [](BackwardArgs &a) { a.dv = nullptr; }, "argument dv is null"},
      {"dq off by 4 bytes", [](BackwardArgs &a) { a.dq = fake(0x80004); },
       "argument dq (0x0000000000080004) is not 16-byte aligned: the kernel uses 16-byte vector "
       "loads"},
      {"dk negative seq stride", [](BackwardArgs &a) { a.dk_strides.seq = -256; },
       "argument dk: seq stride -256 is negative; strides must be >= 0 (the last dimension, "
       "head_dim, is assumed contiguous)"},
      {"dv head stride 65", [](BackwardArgs &a) { a.dv_strides.head = 65; },
       "argument dv: head stride 65 is not a multiple of 8 elements: the kernel uses 16-byte "
       "vector loads, so every row must start 16-byte aligned"},
      {"dout seq stride 516", [](BackwardArgs &a) { a.dout_strides.seq = 516; },
       "argument dout: seq stride 516 is not a multiple of 8 elements: the kernel uses 16-byte "
       "vector loads, so every row must start 16-byte aligned"},
      {"o head stride past 2^62", [](BackwardArgs &a) { a.o_strides.head = int64_t(1) << 60; },
       "argument o: strides (batch 51200, seq 512, head 1152921504606846976) over [batch=2, "
       "seqlen=100, heads=8] reach past 2^62 elements: byte offsets would overflow 64 bits"},
  };
  for (const Case &c : cases) {
    BackwardArgs args = backward_args(p);
    c.edit(args);
    const Status status = backward(p, args);
    ASSERT_FALSE(status.ok()) << c.what;
    EXPECT_EQ(status.message(), "flashjit backward (" + describe(p) + "): " + c.message)
        << c.what;
    ++counts().cxx;
  }
}

// ---- (b) the C API -------------------------------------------------------------

flashjit_problem c_problem() { return testing_c_api::c_problem(FLASHJIT_FP16, FLASHJIT_MASK_NONE); }

TEST(BadInputCorpus, CApiRejectsBadCallsWithLastError) {
  struct Case {
    const char *what;
    std::function<int()> call;
    std::string message;
  };
  static flashjit_forward_args fargs;
  static flashjit_backward_args bargs;
  std::memset(&fargs, 0, sizeof(fargs));
  std::memset(&bargs, 0, sizeof(bargs));
  const std::string fwd_prefix = "flashjit forward (fp16 b=1 hq=4 hkv=4 sq=17 sk=17 d=64 dv=64 ";
  auto problem_with = [](std::function<void(flashjit_problem &)> edit) {
    flashjit_problem p = c_problem();
    edit(p);
    return p;
  };
  auto forward_with = [&](flashjit_problem p, const flashjit_config *config = nullptr) {
    return [p, config] { return flashjit_forward(&p, &fargs, nullptr, config); };
  };
  static const flashjit_config bad_path = {3, 0, 0, 0, 0, 0, 0, 0};
  static const flashjit_config negative_path = {-1, 0, 0, 0, 0, 0, 0, 0};
  static const flashjit_config negative_block_m = {0, -128, 0, 0, 0, 0, 0, 0};
  static const flashjit_config negative_warps = {1, 64, 64, -4, 2, 0, 0, 0};
  static const flashjit_config negative_stages = {0, 0, 0, 0, -2, 1, 0, 0};
  static const flashjit_config too_many_splits = {0, 0, 0, 0, 0, 0, 257, 0};
  static const flashjit_config negative_splits = {0, 0, 0, 0, 0, 1, -2, 0};
  static const flashjit_config bad_pack_gqa = {0, 0, 0, 0, 0, 0, 0, 7};
  const Case cases[] = {
      {"backward: NULL problem",
       [] { return flashjit_backward(nullptr, &bargs, nullptr, nullptr); },
       "flashjit_backward: problem is NULL"},
      {"backward: NULL args",
       [] {
         flashjit_problem p = c_problem();
         return flashjit_backward(&p, nullptr, nullptr, nullptr);
       },
       "flashjit_backward: args is NULL"},
      {"dtype 3", forward_with(problem_with([](flashjit_problem &p) { p.dtype = 3; })),
       "flashjit_forward: problem.dtype=3 is invalid: expected FLASHJIT_BF16 (0), "
       "FLASHJIT_FP16 (1) or FLASHJIT_E4M3 (2)"},
      {"kv_dtype 2", forward_with(problem_with([](flashjit_problem &p) { p.kv_dtype = 2; })),
       "flashjit_forward: problem.kv_dtype=2 is invalid: expected FLASHJIT_KV_SAME (0) or "
       "FLASHJIT_KV_E4M3 (1)"},
      {"out_dtype 3", forward_with(problem_with([](flashjit_problem &p) { p.out_dtype = 3; })),
       "flashjit_forward: problem.out_dtype=3 is invalid: expected FLASHJIT_OUT_AUTO (0), "
       "FLASHJIT_OUT_BF16 (1) or FLASHJIT_OUT_FP16 (2)"},
      {"dtype -1 (backward)",
       [&] {
         flashjit_problem p = problem_with([](flashjit_problem &q) { q.dtype = -1; });
         return flashjit_backward(&p, &bargs, nullptr, nullptr);
       },
       "flashjit_backward: problem.dtype=-1 is invalid: expected FLASHJIT_BF16 (0), "
       "FLASHJIT_FP16 (1) or FLASHJIT_E4M3 (2)"},
      {"mask 3", forward_with(problem_with([](flashjit_problem &p) { p.mask = 3; })),
       "flashjit_forward: problem.mask=3 is invalid: expected FLASHJIT_MASK_NONE (0), "
       "FLASHJIT_MASK_CAUSAL (1) or FLASHJIT_MASK_WINDOW (2)"},
      {"path 3", forward_with(c_problem(), &bad_path),
       "flashjit_forward: config.path=3 is invalid: expected FLASHJIT_PATH_AUTO (0), "
       "FLASHJIT_PATH_SM80 (1) or FLASHJIT_PATH_SM90 (2)"},
      {"path -1", forward_with(c_problem(), &negative_path),
       "flashjit_forward: config.path=-1 is invalid: expected FLASHJIT_PATH_AUTO (0), "
       "FLASHJIT_PATH_SM80 (1) or FLASHJIT_PATH_SM90 (2)"},
      {"block_m -128", forward_with(c_problem(), &negative_block_m),
       "flashjit_forward: config.block_m=-128 is invalid: expected a positive value, or 0 to let "
       "the heuristic choose"},
      {"warps -4", forward_with(c_problem(), &negative_warps),
       "flashjit_forward: config.warps=-4 is invalid: expected a positive value, or 0 to let the "
       "heuristic choose"},
      {"stages -2 (backward)",
       [] {
         flashjit_problem p = c_problem();
         return flashjit_backward(&p, &bargs, nullptr, &negative_stages);
       },
       "flashjit_backward: config.stages=-2 is invalid: expected a positive value, or 0 to let "
       "the heuristic choose"},
      {"splits 257", forward_with(c_problem(), &too_many_splits),
       "flashjit_forward: config.splits=257 is invalid: expected 0 (the heuristic chooses), 1 "
       "(off) or up to 256 splits of the key range"},
      {"splits -2 (backward)",
       [] {
         flashjit_problem p = c_problem();
         return flashjit_backward(&p, &bargs, nullptr, &negative_splits);
       },
       "flashjit_backward: config.splits=-2 is invalid: expected 0 (the heuristic chooses), 1 "
       "(off) or up to 256 splits of the key range"},
      {"pack_gqa 7", forward_with(c_problem(), &bad_pack_gqa),
       "flashjit_forward: config.pack_gqa=7 is invalid: expected FLASHJIT_PACK_GQA_AUTO (0), "
       "FLASHJIT_PACK_GQA_ON (1) or FLASHJIT_PACK_GQA_OFF (2)"},
      {"zero heads_kv passes through",
       forward_with(problem_with([](flashjit_problem &p) { p.heads_kv = 0; })),
       "flashjit forward (fp16 b=1 hq=4 hkv=0 sq=17 sk=17 d=64 dv=64 none): heads_kv=0 is out "
       "of range: expected 1 to 2147483647"},
      {"window -3 passes through", forward_with(problem_with([](flashjit_problem &p) {
         p.mask = FLASHJIT_MASK_WINDOW;
         p.window_left = -3;
       })),
       fwd_prefix + "window(-3,-1)): window=(-3,-1) is invalid: each bound is -1 (unbounded) or "
                    ">= 0"},
      {"null args' q passes through", forward_with(c_problem()),
       fwd_prefix + "none): argument q is null"},
      {"backward, workspace 0",
       [] {
         flashjit_problem p = c_problem();
         return flashjit_backward(&p, &bargs, nullptr, nullptr);
       },
       "flashjit backward (fp16 b=1 hq=4 hkv=4 sq=17 sk=17 d=64 dv=64 none): argument "
       "workspace: 0 bytes given, 17956 needed (backward_workspace_bytes)"},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(c.call(), 1) << c.what;
    EXPECT_EQ(std::string(flashjit_last_error()), c.message) << c.what;
    ++counts().c_api;
  }
  // flashjit_backward_workspace_bytes: 0 for what cannot be sized, never a
  // wrapped small number.
  const std::pair<const char *, flashjit_problem> unsized[] = {
      {"workspace of batch -1", problem_with([](flashjit_problem &p) { p.batch = -1; })},
      {"workspace of dtype 9", problem_with([](flashjit_problem &p) { p.dtype = 9; })},
      {"workspace that overflows", problem_with([](flashjit_problem &p) {
         p.batch = p.heads_q = 65535;
         p.seqlen_q = kMaxInt;
         p.head_dim_qk = 256;
       })},
  };
  for (const auto &[what, p] : unsized) {
    EXPECT_EQ(flashjit_backward_workspace_bytes(&p), 0u) << what;
    ++counts().c_api;
  }
  EXPECT_EQ(flashjit_backward_workspace_bytes(nullptr), 0u);
  ++counts().c_api;
}

// ---- (c) the CLI ---------------------------------------------------------------

TEST(BadInputCorpus, CliRejectsBadFlagsWithExitCode2) {
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"gen", "--arch", "sm_80", "--dtype", "BF16"}, "--dtype: expected bf16, fp16 or e4m3, got BF16"},
      {{"gen", "--arch", "sm_80", "--hdim", "0"},
       "--hdim: expected a multiple of 8 in [8, 576], got 0"},
      {{"gen", "--arch", "sm_80", "--hdim", "640"},
       "--hdim: expected a multiple of 8 in [8, 576], got 640"},
      {{"gen", "--arch", "sm_80", "--hdim-v", "7"},
       "--hdim-v: expected a multiple of 8 in [8, 576], got 7"},
      {{"gen", "--arch", "sm_80", "--batch", "-1"}, "--batch: expected a positive integer, got -1"},
      {{"gen", "--arch", "sm_80", "--batch", "70000"},
       "--batch: expected at most 65535 (a grid dimension), got 70000"},
      {{"gen", "--arch", "sm_80", "--heads", "0"}, "--heads: expected a positive integer, got 0"},
      {{"gen", "--arch", "sm_80", "--heads", "16", "--heads-kv", "0"},
       "--heads-kv: expected a divisor of --heads (16), got 0"},
      {{"gen", "--arch", "sm_80", "--seqlen", "2147483648"},
       "--seqlen: expected at most 2147483647 (rows are 32-bit), got 2147483648"},
      {{"gen", "--arch", "sm_80", "--mask", "window:5"},
       "--mask: expected none, causal or window:LEFT,RIGHT (-1: unbounded), got window:5"},
      {{"gen", "--arch", "sm_80", "--mask", "window:a,b"},
       "--mask: expected none, causal or window:LEFT,RIGHT (-1: unbounded), got window:a,b"},
      {{"gen", "--arch", "sm_80", "--mask", "window:0,-3"},
       "--mask: expected none, causal or window:LEFT,RIGHT (-1: unbounded), got window:0,-3"},
      {{"gen", "--arch", "sm_80", "--mask", "causal:1"},
       "--mask: expected none, causal or window:LEFT,RIGHT (-1: unbounded), got causal:1"},
      {{"gen", "--arch", "sm_80", "--softcap", "-1"},
       "--softcap: expected a finite number >= 0 (0: off), got -1"},
      {{"gen", "--arch", "sm_80", "--softcap", "nan"},
       "--softcap: expected a finite number >= 0 (0: off), got nan"},
      {{"gen", "--arch", "sm_80", "--scale", "1e39"},
       "--scale: expected a finite number >= 0 (0: 1/sqrt(hdim)), got 1e39"},
      {{"gen", "--arch", "sm_80", "--scale", "-0.125"},
       "--scale: expected a finite number >= 0 (0: 1/sqrt(hdim)), got -0.125"},
      {{"gen", "--arch", "sm_80", "--path", "sm70"},
       "--path: expected auto, sm80 or sm90, got sm70"},
      {{"gen", "--arch", "sm_80", "--pass", "both"}, "--pass: expected fwd or bwd, got both"},
      // An explicit path the problem cannot use: refused, never run on sm80.
      {{"gen", "--arch", "sm_90a", "--path", "sm90", "--hdim", "24"},
       "kernel path sm90 is not available: head_dim=24: the sm90 kernel serves head dims that "
       "are multiples of 8 from 32 to 576 (16-byte TMA rows, tiled as 64, 128, 192, 256, then "
       "whole 64 columns); use sm80"},
      {{"gen", "--arch", "sm_90a", "--path", "sm90", "--pass", "bwd", "--hdim", "16"},
       "backward kernel path sm90 is not available: head_dim=16: the sm90 backward serves head "
       "dims that are multiples of 8 from 32 to 256 (16-byte TMA rows, tiled as 32, 64, 96, "
       "128, 192 or 256); use sm80"},
      {{"gen", "--arch", "sm_80", "--path", "sm90"},
       "kernel path sm90 needs an sm_90a target (wgmma, setmaxnreg, TMA), not sm_80: use sm80"},
      {{"gen", "--arch", "sm_80", "--block-m", "-64"},
       "--block-m: expected 0 (heuristic) or a positive integer, got -64"},
      {{"gen", "--arch", "sm_80", "--block-n", "2048"},
       "--block-n: expected at most 1024, got 2048"},
      {{"gen", "--arch", "sm_80", "--stages", "x"},
       "--stages: expected 0 (heuristic) or a positive integer, got x"},
      {{"gen", "--arch", "sm_75"},
       "--arch: architecture 'sm_75' not understood: expected sm_XY or sm_XYa with XY >= 80 "
       "(sm_80, sm_86, sm_89, sm_90a)"},
      {{"gen", "--arch", "sm_80a"},
       "--arch: architecture 'sm_80a': the 'a' suffix exists from sm_90 on"},
      {{"compile", "--arch", "compute_90"},
       "--arch: architecture 'compute_90' not understood: expected sm_XY or sm_XYa with XY >= 80 "
       "(sm_80, sm_86, sm_89, sm_90a)"},
      {{"gen", "--arch", "sm_"},
       "--arch: architecture 'sm_' not understood: expected sm_XY or sm_XYa with XY >= 80 "
       "(sm_80, sm_86, sm_89, sm_90a)"},
      {{"frobnicate"},
       "Unknown command line argument 'frobnicate'.  Try: '" + cli_path() + " --help'"},
      // The database's trust and verification flags.
      {{"info", "--db-trust=everyone"}, "--db-trust: expected owner or group, got 'everyone'"},
      {{"db", "verify", "--sample", "x"}, "--sample: expected an integer >= 0, got x"},
      {{"db", "verify", "--threads", "-1"}, "--threads: expected an integer >= 0, got -1"},
      {{"db", "list", "--sample", "2"}, "--sample: only for db verify"},
      {{"db", "import", "--repair", "f.yaml"}, "--repair: only for db verify"},
      {{"db", "list", "--verify"}, "--verify: only for db import"},
      {{"db", "import", "--verify", "--no-verify", "--accept-cubins", "f.yaml"},
       "--verify and --no-verify: pick one"},
      {{"db", "import", "--no-verify", "f.yaml"}, "--no-verify: only with --accept-cubins"},
      {{"db", "export", "--threads", "2", "f.yaml"}, "--threads: only for db verify and db import"},
      {{"db", "verify", "f.yaml"}, "db verify: unexpected argument 'f.yaml'"},
      {{"db", "import", "--json", "f.yaml"}, "--json: only for db list and db verify"},
  };
  for (const auto &[args, message] : cases) {
    std::string shown;
    for (const std::string &a : args) shown += a + " ";
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << shown;
    EXPECT_EQ(r.err, "flashjit: error: " + message + "\n") << shown;
    EXPECT_EQ(r.out, "") << shown;
    ++counts().cli;
  }
}

// ---- (d) plan files ----------------------------------------------------------------

TEST(BadInputCorpus, PlanErrorsNameFileLineAndKey) {
  const std::string head = "name: x\ndefaults: {heads: 16, hdim: 128}\nproblems:\n";
  const std::pair<std::string, std::string> cases[] = {
      {head + "  - {seqlen: 8, heads: abc}\n",
       "p.yaml:4: key 'heads': expected a positive integer, got abc"},
      {head + "  - {seqlen: 8, heads: 70000}\n",
       "p.yaml:4: key 'heads': expected at most 65535 (a grid dimension), got 70000"},
      {head + "  - {seqlen: 2147483648}\n",
       "p.yaml:4: key 'seqlen': expected at most 2147483647 (rows are 32-bit), got 2147483648"},
      {head + "  - {seqlen: 8, batch: [2]}\n",
       "p.yaml:4: key 'batch': expected a positive integer, got a list"},
      {head + "  - {seqlen: 8, hdim: {a: 1}}\n",
       "p.yaml:4: key 'hdim': expected a multiple of 8 in [8, 576], got a mapping"},
      {head + "  - {seqlen: 8, hdim: 0}\n",
       "p.yaml:4: key 'hdim': expected a multiple of 8 in [8, 576], got 0"},
      {head + "  - {seqlen: 8, dtype: [bf16]}\n",
       "p.yaml:4: key 'dtype': expected bf16, fp16 or e4m3, got a list"},
      {head + "  - {seqlen: 8, mask: [causal]}\n",
       "p.yaml:4: key 'mask': expected none, causal or window, got a list"},
      {head + "  - {seqlen: 8, mask: window, window: [0, x]}\n",
       "p.yaml:4: key 'window': expected [left, right], each -1 (unbounded) or >= 0, got x"},
      {head + "  - {seqlen: 8, mask: window, window: 5}\n",
       "p.yaml:4: key 'window': expected [left, right], each -1 (unbounded) or >= 0, got 5"},
      {head + "  - {seqlen: 8, heads_kv: 0}\n",
       "p.yaml:4: key 'heads_kv': expected a divisor of heads (16), got 0"},
      {head + "  - {seqlen: 8, softcap: inf}\n",
       "p.yaml:4: key 'softcap': expected a finite number >= 0 (0: off), got inf"},
      {head + "  - {seqlen: 8, scale: -0.5}\n",
       "p.yaml:4: key 'scale': expected a finite number >= 0 (0: 1/sqrt(hdim)), got -0.5"},
      {head + "  - {seqlen: 8, scale: 1e39}\n",
       "p.yaml:4: key 'scale': expected a finite number >= 0 (0: 1/sqrt(hdim)), got 1e39"},
      {head + "  - {seqlen_q: 8}\n",
       "p.yaml:4: problem: missing key 'seqlen_k' (or 'seqlen') (give it in the problem or in "
       "defaults)"},
      {"defaults: {heads: 16}\nproblems:\n  - {seqlen: 8}\n",
       "p.yaml:3: problem: missing key 'hdim' (give it in the problem or in defaults)"},
      {head + "  - {seqlen: 8, batch: 65535, heads: 65535, seqlen: 2147483647}\n",
       "p.yaml:4: key 'seqlen': given twice"},
      {"defaults: {heads: 65535, hdim: 256, batch: 65535}\nproblems:\n"
       "  - {seqlen: 2147483647}\n",
       "p.yaml:3: batch*heads_q*seqlen_q=65535*65535*2147483647 rows is too large: the tensors' "
       "byte offsets would overflow 64 bits"},
      {"name: a\nname: b\nproblems:\n  - {seqlen: 8, heads: 8, hdim: 64}\n",
       "p.yaml:2: key 'name': given twice"},
      {"defaults: {heads: 8, heads: 16}\nproblems:\n  - {seqlen: 8, hdim: 64}\n",
       "p.yaml:1: key 'heads': given twice"},
      {"name: ''\nproblems:\n  - {seqlen: 8, heads: 8, hdim: 64}\n",
       "p.yaml:1: key 'name': expected a non-empty string, got ''"},
      {"name: x\nproblems: {seqlen: 8}\n",
       "p.yaml:2: key 'problems': expected a non-empty list of problems, got a mapping"},
      {"name: x\nproblems: []\n",
       "p.yaml:2: key 'problems': expected a non-empty list of problems, got an empty list"},
      {head + "  - ~\n", "p.yaml:4: key 'problems': expected each item a mapping of problem keys, "
                         "got nothing"},
      {"name: x\nproblems: *nowhere\n",
       "p.yaml:2: invalid YAML: the referenced anchor is not defined"},
      {"name: x\nproblems: [{seqlen: 8]\n", "p.yaml:2: invalid YAML: illegal flow end"},
      {"name: x\nproblems: {\n", "p.yaml:3: invalid YAML: end of map flow not found"},
      {"name: x\n  problems: []\n", "p.yaml:2: invalid YAML: illegal map value"},
  };
  for (const auto &[text, message] : cases) {
    auto plan = parse_plan(text, "p.yaml");
    ASSERT_FALSE(bool(plan)) << text;
    EXPECT_EQ(llvm::toString(plan.takeError()), message) << text;
    ++counts().plan;
  }
}

// ---- (e) database import ---------------------------------------------------------

std::string joined(const std::vector<std::string> &lines) {
  std::string out;
  for (const std::string &line : lines) out += line + "\n";
  return out;
}

// A tuning entry as the export writes it, with `edit` applied to its text.
std::string tuning_entry() {
  return "  - device: {name: \"NVIDIA H200\", cc_major: 9, cc_minor: 0, sm_count: 132, "
         "driver_version: 13000}\n"
         "    software: {nvrtc_version: \"13.0\", templates_hash: \"abc\"}\n"
         "    problem: {pass: fwd, dtype: bf16, head_dim_qk: 128, head_dim_v: 128, mask: none, "
         "window_left: -1, window_right: -1, softcap: false, gqa_ratio: 1, seqlen_q_bucket: 12, "
         "seqlen_k_bucket: 12, batch_heads_bucket: 6}\n"
         "    config: {path: sm90, block_m: 128, block_n: 128, warps: 12, stages: 2}\n"
         "    median_ms: 0.5\n";
}

std::string with(std::string text, const std::string &from, const std::string &to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::string sha256_of(const std::vector<char> &bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
                         reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())),
                     /*LowerCase=*/true);
}

std::string cubin_entry(const std::vector<char> &bytes, const std::string &sha) {
  return "  - key: \"k-new\"\n    kernel_id: \"fwd\"\n    arch: \"sm_90a\"\n"
         "    nvrtc_version: \"13.0\"\n    blob_sha256: \"" +
         sha + "\"\n    blob: " + base64_encode(bytes) + "\n";
}

TEST(BadInputCorpus, RefusedImportsLeaveTheDatabaseUnchanged) {
  TempDir dir;
  const std::string path = dir.file("target.db");
  auto db = open_ok(path);
  ASSERT_TRUE(db);
  ASSERT_FALSE(bool(db->put_tuning(full_record(0))));
  ASSERT_FALSE(bool(db->put_cubin(cubin("k1", 300))));
  // Checkpointed, so that the file alone holds every row.
  raw_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");

  const std::string doc = "flashjit_db_export: 1\nschema_version: 1\n";
  const std::vector<char> blob = {'E', 'L', 'F', '!', 0, 1, 2, 3};
  std::string real_sha;
  {
    // The hash the import computes, via a round trip through a scratch db.
    auto scratch = open_ok(dir.file("scratch.db"));
    CubinRecord c = cubin("k-new", 0);
    c.bytes = blob;
    ASSERT_FALSE(bool(scratch->put_cubin(c)));
    real_sha = (*scratch->list_cubins())[0].blob_sha256;
  }
  const std::string bad_sha = std::string(64, 'a');
  const std::string missing = dir.file("absent.yaml");
  const std::string t = tuning_entry();

  struct Case {
    const char *what;
    std::string text;  // written to the import file (unless the file is `missing`)
    bool accept_cubins;
    std::string error;    // the import's error ("{file}" is replaced), or ""...
    std::string skipped;  // ...the report's skipped lines, joined
  };
  const Case cases[] = {
      {"missing file", "", false, missing + ": cannot read: No such file or directory", ""},
      {"empty file", "", false,
       "{file}: not a flashjit database export (no `flashjit_db_export` key at the top level)", ""},
      {"a plan", "name: x\nproblems:\n  - {seqlen: 8}\n", false,
       "{file}: not a flashjit database export (no `flashjit_db_export` key at the top level)", ""},
      {"format 0", "flashjit_db_export: 0\nschema_version: 1\n", false,
       "{file}:1: flashjit_db_export: format '0' is not supported (this flashjit reads format 1)",
       ""},
      {"format abc", "flashjit_db_export: abc\nschema_version: 1\n", false,
       "{file}:1: flashjit_db_export: format 'abc' is not supported (this flashjit reads format "
       "1)",
       ""},
      {"no schema_version", "flashjit_db_export: 1\ntunings: []\n", false,
       "{file}: schema_version is missing or not an integer", ""},
      {"schema_version x", "flashjit_db_export: 1\nschema_version: x\n", false,
       "{file}: schema_version is missing or not an integer", ""},
      {"newer schema", "flashjit_db_export: 1\nschema_version: 6\ntunings:\n" + t, false,
       "{file}:2: schema_version: 6 is newer than this flashjit's 5 (exported by a newer "
       "flashjit)",
       ""},
      {"cubins not a list", doc + "cubins: {a: 1}\n", true, "{file}:3: cubins: is not a list", ""},
      {"unclosed flow", doc + "tunings: [\n", false,
       "{file}:4:1: end of sequence flow not found", ""},
      {"unclosed quote in a flow map", doc + "tunings:\n  - device: {name: \"H200}\n", false,
       "{file}:5:1: end of map flow not found", ""},
      {"missing device.name", doc + "tunings:\n" + with(t, "name: \"NVIDIA H200\", ", ""), false,
       "", "tunings[0] (line 4): skipped: device.name: missing\n"},
      {"fractional head_dim_qk", doc + "tunings:\n" + with(t, "head_dim_qk: 128", "head_dim_qk: 1.5"),
       false, "", "tunings[0] (line 4): skipped: problem.head_dim_qk: '1.5' is not an integer\n"},
      {"softcap maybe", doc + "tunings:\n" + with(t, "softcap: false", "softcap: maybe"), false, "",
       "tunings[0] (line 4): skipped: problem.softcap: 'maybe' is not true or false\n"},
      {"median fast", doc + "tunings:\n" + with(t, "median_ms: 0.5", "median_ms: fast"), false, "",
       "tunings[0] (line 4): skipped: median_ms: 'fast' is not a number\n"},
      {"device a string", doc + "tunings:\n  - device: H200\n", false, "",
       "tunings[0] (line 4): skipped: device: is not a mapping\n"},
      {"null templates_hash",
       doc + "tunings:\n" + with(t, "templates_hash: \"abc\"", "templates_hash: ~"), false, "",
       "tunings[0] (line 4): skipped: software.templates_hash: has no value\n"},
      {"pass sideways", doc + "tunings:\n" + with(t, "pass: fwd", "pass: sideways"), false, "",
       "tunings[0] (line 4): skipped: problem.pass: 'sideways' is not fwd, bwd or bwd-det\n"},
      {"dtype fp64", doc + "tunings:\n" + with(t, "dtype: bf16", "dtype: fp64"), false, "",
       "tunings[0] (line 4): skipped: problem.dtype: 'fp64' is not bf16, fp16 or e4m3\n"},
      {"mask diagonal", doc + "tunings:\n" + with(t, "mask: none", "mask: diagonal"), false, "",
       "tunings[0] (line 4): skipped: problem.mask: 'diagonal' is not none, causal or window, "
       "optionally followed by +chunk<N> (N > 0)\n"},
      {"mask causal+chunk0", doc + "tunings:\n" + with(t, "mask: none", "mask: causal+chunk0"),
       false, "",
       "tunings[0] (line 4): skipped: problem.mask: 'causal+chunk0' is not none, causal or "
       "window, optionally followed by +chunk<N> (N > 0)\n"},
      {"mask causal+chunk064", doc + "tunings:\n" + with(t, "mask: none", "mask: causal+chunk064"),
       false, "",
       "tunings[0] (line 4): skipped: problem.mask: 'causal+chunk064' is not none, causal or "
       "window, optionally followed by +chunk<N> (N > 0)\n"},
      {"head_dim_v 100", doc + "tunings:\n" + with(t, "head_dim_v: 128", "head_dim_v: 100"), false,
       "", "tunings[0] (line 4): skipped: problem.head_dim_v: 100 is not a multiple of 8 in [8, "
           "256]\n"},
      {"kv_layout paged1024",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, kv_layout: paged1024,"), false,
       "", "tunings[0] (line 4): skipped: problem.kv_layout: 'paged1024' is not contiguous, packed, "
           "paged<N> or packed-paged<N> (N in [1, 512])\n"},
      {"modifiers not a hash",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, modifiers: 0123ABCD,"),
       false, "",
       "tunings[0] (line 4): skipped: problem.modifiers: '0123ABCD' is not empty (no modifiers) "
       "or a modifiers hash of 16 lowercase hex digits\n"},
      {"kv_dtype fp16",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, kv_dtype: fp16,"), false, "",
       "tunings[0] (line 4): skipped: problem.kv_dtype: 'fp16' is not same or e4m3\n"},
      {"out_dtype e4m3",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, out_dtype: e4m3,"), false,
       "", "tunings[0] (line 4): skipped: problem.out_dtype: 'e4m3' is not auto, bf16 or fp16\n"},
      {"kv_layout packed-paged513",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, kv_layout: packed-paged513,"),
       false, "",
       "tunings[0] (line 4): skipped: problem.kv_layout: 'packed-paged513' is not contiguous, "
       "packed, paged<N> or packed-paged<N> (N in [1, 512])\n"},
      {"kv_layout paged064",
       doc + "tunings:\n" + with(t, "gqa_ratio: 1,", "gqa_ratio: 1, kv_layout: paged064,"), false,
       "", "tunings[0] (line 4): skipped: problem.kv_layout: 'paged064' is not contiguous, packed, "
           "paged<N> or packed-paged<N> (N in [1, 512])\n"},
      {"path sm99", doc + "tunings:\n" + with(t, "path: sm90", "path: sm99"), false, "",
       "tunings[0] (line 4): skipped: config.path: 'sm99' is not sm80 or sm90\n"},
      {"block_m -128", doc + "tunings:\n" + with(t, "block_m: 128", "block_m: -128"), false, "",
       "tunings[0] (line 4): skipped: config.block_m: -128 is not a positive integer\n"},
      {"warps 0", doc + "tunings:\n" + with(t, "warps: 12", "warps: 0"), false, "",
       "tunings[0] (line 4): skipped: config.warps: 0 is not a positive integer\n"},
      {"splits 300", doc + "tunings:\n" + with(t, "stages: 2}", "stages: 2, splits: 300}"), false,
       "", "tunings[0] (line 4): skipped: config.splits: 300 is not in [0, 256]\n"},
      {"splits many", doc + "tunings:\n" + with(t, "stages: 2}", "stages: 2, splits: many}"),
       false, "", "tunings[0] (line 4): skipped: config.splits: 'many' is not an integer\n"},
      {"pack_gqa yes", doc + "tunings:\n" + with(t, "stages: 2}", "stages: 2, pack_gqa: yes}"),
       false, "", "tunings[0] (line 4): skipped: config.pack_gqa: 'yes' is not auto, on or off\n"},
      {"pack_gqa empty",
       doc + "tunings:\n" + with(t, "stages: 2}", "stages: 2, pack_gqa: \"\"}"), false, "",
       "tunings[0] (line 4): skipped: config.pack_gqa: is empty\n"},
      {"cubins without the flag", doc + "cubins:\n" + cubin_entry(blob, real_sha) +
                                      cubin_entry(blob, real_sha),
       false, "", "cubins: 2 entries skipped: cubins are code: pass --accept-cubins to import them\n"},
      {"cubin whose blob does not match", doc + "cubins:\n" + cubin_entry(blob, bad_sha), true, "",
       "cubins[0] (line 4): skipped: blob: hashes to " + real_sha + ", not blob_sha256 " +
           bad_sha + " (corrupted or edited)\n"},
      {"cubin blob not base64",
       doc + "cubins:\n" + with(cubin_entry(blob, real_sha), "blob: ", "blob: !!notbase64"), true,
       "", ""},  // the message is base64_decode's: checked below
      {"cubin without key", doc + "cubins:\n" + with(cubin_entry(blob, real_sha), "key: \"k-new\"\n    ", ""),
       true, "", "cubins[0] (line 4): skipped: key: missing\n"},
      {"cubin without blob_sha256",
       doc + "cubins:\n" + with(cubin_entry(blob, real_sha), "blob_sha256: \"" + real_sha + "\"\n    ", ""),
       true, "", "cubins[0] (line 4): skipped: blob_sha256: missing\n"},
      {"cubin entry a string", doc + "cubins:\n  - \"ELF\"\n", true, "",
       "cubins[0] (line 4): skipped: entry: is not a mapping\n"},
      // Cubins of an export that is not this user's own are stored only when
      // they reproduce; an import with no way to recompile stores none.
      {"an intact cubin of an unsigned export", doc + "cubins:\n" + cubin_entry(blob, real_sha),
       true, "",
       "cubins[0] (line 4): refused: fwd (key k-new): not verified: this import has no way to "
       "recompile it\n"},
      {"a cubin under a signature that does not check",
       doc + "origin: {host: h, user: u, database: /d, exported_at: t, signature: "
             "\"hmac-sha256:00\"}\ncubins:\n" + cubin_entry(blob, real_sha),
       true, "",
       "cubins[0] (line 5): refused: fwd (key k-new): not verified: this import has no way to "
       "recompile it\n"},
      {"a cubin under an origin that is not a mapping",
       doc + "origin: [1, 2]\ncubins:\n" + cubin_entry(blob, real_sha), true, "",
       "cubins[0] (line 5): refused: fwd (key k-new): not verified: this import has no way to "
       "recompile it\n"},
  };

  const std::string before_bytes = read_bytes(path);
  const auto before_tunings = *db->list_tunings();
  const int64_t before_cubins = *db->count_cubins();
  ASSERT_EQ(before_tunings.size(), 1u);
  ASSERT_EQ(before_cubins, 1);

  for (const Case &c : cases) {
    const bool absent = llvm::StringRef(c.what) == "missing file";
    const std::string file = absent ? missing : dir.file("import.yaml");
    if (!absent) write_bytes(file, c.text);
    ImportOptions options;
    options.accept_cubins = c.accept_cubins;
    auto report = db->import_yaml(file, options);
    if (!c.error.empty()) {
      ASSERT_FALSE(bool(report)) << c.what;
      std::string expected = c.error;
      if (size_t at = expected.find("{file}"); at != std::string::npos)
        expected.replace(at, 6, file);
      EXPECT_EQ(llvm::toString(report.takeError()), expected) << c.what;
    } else {
      ASSERT_TRUE(bool(report)) << c.what << ": " << llvm::toString(report.takeError());
      EXPECT_EQ(report->tunings_added + report->tunings_replaced + report->cubins_added +
                    report->cubins_replaced,
                0)
          << c.what;
      if (!c.skipped.empty()) {
        EXPECT_EQ(joined(report->skipped), c.skipped) << c.what;
      } else {
        ASSERT_EQ(report->skipped.size(), 1u) << c.what;
        EXPECT_EQ(report->skipped[0].rfind("cubins[0] (line 4): skipped: blob: ", 0), 0u)
            << report->skipped[0];
      }
    }
    // Nothing changed: the rows, and the file's bytes.
    const auto after = *db->list_tunings();
    ASSERT_EQ(after.size(), 1u) << c.what;
    expect_same(after[0], before_tunings[0]);
    EXPECT_EQ(*db->count_cubins(), before_cubins) << c.what;
    EXPECT_EQ(read_bytes(path), before_bytes) << c.what;
    ++counts().db_import;
  }
}

// ---- (f) opening what is not a flashjit database -------------------------------------

TEST(BadInputCorpus, NonFlashjitFilesAreRefusedAndLeftByteIdentical) {
  TempDir dir;
  const std::string tail =
      " is not usable as a flashjit database: {why}; the file was left untouched (choose another "
      "file with --db or $FLASHJIT_DB)";
  struct Case {
    const char *what;
    std::function<void(const std::string &)> make;
    std::string why;
  };
  const Case cases[] = {
      {"a text file",
       [](const std::string &f) { write_bytes(f, "my notes\n" + std::string(5000, 'n')); },
       "it is not an SQLite database"},
      {"an ELF binary",
       [](const std::string &f) {
         write_bytes(f, std::string("\x7f" "ELF\x02\x01\x01", 7) + std::string(4089, '\0'));
       },
       "it is not an SQLite database"},
      {"a page of zeros", [](const std::string &f) { write_bytes(f, std::string(4096, '\0')); },
       "it is not an SQLite database"},
      {"another application's database",
       [](const std::string &f) { raw_sql(f, "CREATE TABLE photos (id INTEGER, path TEXT)"); },
       "it is an SQLite database of another application (no flashjit `meta` table)"},
      {"a meta table of someone else",
       [](const std::string &f) {
         raw_sql(f, "CREATE TABLE meta (key TEXT, value TEXT); "
                    "INSERT INTO meta VALUES ('application', 'darktable')");
       },
       "it belongs to application 'darktable', not flashjit"},
      {"a meta table without the columns",
       [](const std::string &f) { raw_sql(f, "CREATE TABLE meta (id INTEGER)"); },
       "its `meta` table is not flashjit's: {path}: `SELECT value FROM meta WHERE key = ?1`: no "
       "such column: value (code 1)"},
      {"a schema version that is not a number",
       [](const std::string &f) {
         raw_sql(f, "CREATE TABLE meta (key TEXT, value TEXT); "
                    "INSERT INTO meta VALUES ('application', 'flashjit'), "
                    "('schema_version', 'one')");
       },
       "its schema_version 'one' is not a version number"},
      {"a newer flashjit's database",
       [](const std::string &f) {
         raw_sql(f, "CREATE TABLE meta (key TEXT, value TEXT); "
                    "INSERT INTO meta VALUES ('application', 'flashjit'), ('schema_version', '9')");
       },
       "it has schema version 9, newer than this flashjit's 5 (written by a newer flashjit: "
       "upgrade to use it)"},
  };
  int n = 0;
  for (const Case &c : cases) {
    const std::string path = dir.file(numbered("f", n++));
    c.make(path);
    const std::string before = read_bytes(path);
    auto db = TuningDb::open(path);
    ASSERT_FALSE(bool(db)) << c.what;
    std::string expected = path + tail;
    expected.replace(expected.find("{why}"), 5, c.why);
    if (size_t at = expected.find("{path}"); at != std::string::npos)
      expected.replace(at, 6, path);
    EXPECT_EQ(llvm::toString(db.takeError()), expected) << c.what;
    EXPECT_EQ(read_bytes(path), before) << c.what;
    EXPECT_FALSE(llvm::sys::fs::exists(path + "-wal")) << c.what;
    ++counts().db_open;
  }
}

// ---- (g) databases others can write ---------------------------------------------

// A database whose file, companions or folder others can write serves no
// cubin: one exact message each, and the file is left byte-identical.
TEST(BadInputCorpus, DatabasesOthersCanWriteServeNoCubins) {
  ScopedEnv scope("FLASHJIT_DB_TRUST", nullptr);
  struct Case {
    const char *what;
    const char *trust;  // FLASHJIT_DB_TRUST, or null
    // Loosens the database at `path` in `folder`; returns the problem.
    std::function<std::string(const std::string &path, const std::string &folder)> loosen;
    std::string fix;  // "{path}" and "{folder}" replaced
  };
  const Case cases[] = {
      {"a world-writable file", nullptr,
       [](const std::string &path, const std::string &) {
         ::chmod(path.c_str(), 0666);
         return "the file " + path + " is writable by everyone (mode 0666)";
       },
       "chmod go-w {path}"},
      {"a world-writable -wal", nullptr,
       [](const std::string &path, const std::string &) {
         ::chmod((path + "-wal").c_str(), 0666);
         return "the file " + path + "-wal is writable by everyone (mode 0666)";
       },
       "chmod go-w {path}-wal"},
      {"a world-writable -shm", nullptr,
       [](const std::string &path, const std::string &) {
         ::chmod((path + "-shm").c_str(), 0606);
         return "the file " + path + "-shm is writable by everyone (mode 0606)";
       },
       "chmod go-w {path}-shm"},
      {"a -journal planted beside it", nullptr,
       [](const std::string &path, const std::string &) {
         write_bytes(path + "-journal", "");
         ::chmod((path + "-journal").c_str(), 0666);
         return "the file " + path + "-journal is writable by everyone (mode 0666)";
       },
       "chmod go-w {path}-journal"},
      {"a world-writable folder", nullptr,
       [](const std::string &, const std::string &folder) {
         ::chmod(folder.c_str(), 0777);
         return "the folder " + folder + " is writable by everyone (mode 0777)";
       },
       "chmod go-w {folder}"},
      {"a sticky world-writable folder, as /tmp", nullptr,
       [](const std::string &, const std::string &folder) {
         ::chmod(folder.c_str(), 01777);
         return "the folder " + folder +
                " is writable by everyone (mode 1777; the sticky bit does not stop others from "
                "creating the database's -wal or -journal first, which SQLite merges into it)";
       },
       "keep the database in a folder only you can write (the default is "
       "$XDG_CACHE_HOME/flashjit or ~/.cache/flashjit)"},
      {"group trust does not cover everyone", "group",
       [](const std::string &path, const std::string &) {
         ::chmod(path.c_str(), 0666);
         return "the file " + path + " is writable by everyone (mode 0666)";
       },
       "chmod o-w {path}"},
      {"a misspelt opt-in", "groups",
       [](const std::string &, const std::string &) {
         return std::string("FLASHJIT_DB_TRUST: expected owner or group, got 'groups'");
       },
       "set FLASHJIT_DB_TRUST to owner (the default) or group"},
  };
  int n = 0;
  for (const Case &c : cases) {
    TempDir dir;
    const std::string folder = dir.file("db" + std::to_string(n++));
    ASSERT_FALSE(llvm::sys::fs::create_directory(folder));
    ::chmod(folder.c_str(), 0700);
    const std::string path = folder + "/f.db";
    {
      auto db = open_ok(path);
      ASSERT_TRUE(db);
      ASSERT_FALSE(bool(db->put_cubin(cubin("k1", 300))));
      raw_sql(path, "PRAGMA wal_checkpoint(TRUNCATE)");
    }
    // Open (with its -wal and -shm, as a running process has them) before
    // the change: the check runs at the first cubin read.
    ScopedEnv trust("FLASHJIT_DB_TRUST", c.trust);
    auto reopened = open_ok(path);
    const std::string problem = c.loosen(path, folder);
    const std::string before = read_bytes(path);
    std::string refused;
    auto row = reopened->get_cubin("k1", &refused);
    ASSERT_TRUE(bool(row)) << c.what << ": " << llvm::toString(row.takeError());
    EXPECT_FALSE(row->has_value()) << c.what;
    std::string fix = c.fix;
    for (auto [from, to] : {std::pair<std::string, std::string>{"{path}", path}, {"{folder}", folder}})
      if (size_t at = fix.find(from); at != std::string::npos) fix.replace(at, from.size(), to);
    EXPECT_EQ(refused, "not loading cubins from the tuning database " + path + ": " + problem +
                           ". Whoever can write it could run code in this process, so kernels "
                           "are compiled instead. Fix: " + fix)
        << c.what;
    EXPECT_EQ(read_bytes(path), before) << c.what;
    ::chmod(folder.c_str(), 0700);
    ++counts().db_trust;
  }
}

// ---- (h) stored cubins whose program cannot be rebuilt ----------------------------

// A row that lacks what regenerating its program needs is never counted as
// verified; each says why (no compile is reached).
TEST(BadInputCorpus, RowsThatCannotBeRebuiltAreNeverVerified) {
  auto nvrtc = nvrtc_version();
  if (!nvrtc) GTEST_SKIP() << "no NVRTC: " << llvm::toString(nvrtc.takeError());
  const std::string good = "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_sm_80";
  struct Case {
    const char *what;
    std::string kernel_id, arch, nvrtc_version;
    std::string detail;
  };
  const Case cases[] = {
      {"another NVRTC", good, "sm_80", "12.8",
       "it was compiled by NVRTC 12.8; this machine has NVRTC " + *nvrtc +
           ", whose output differs (and whose calls never load it)"},
      {"a caller's modifiers",
       "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_modffffffffffffffff_sm_80",
       "sm_80", *nvrtc,
       "it was compiled with a caller's modifiers (modffffffffffffffff), whose source the "
       "database does not hold"},
      {"an arch flashjit does not target", good, "sm_75", *nvrtc,
       "its arch: architecture 'sm_75' not understood: expected sm_XY or sm_XYa with XY >= 80 "
       "(sm_80, sm_86, sm_89, sm_90a)"},
      {"an id for another arch", good, "sm_90a", *nvrtc,
       "its kernel id names sm_80, its arch is sm_90a"},
      {"an empty id", "", "sm_80", *nvrtc, "kernel id '': too few fields for a kernel id"},
      {"fields out of order", "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_split_det_sm_80",
       "sm_80", *nvrtc,
       "kernel id 'fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_split_det_sm_80': not "
       "as flashjit writes it "
       "('fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_det_split_sm_80')"},
      {"an id with a size flashjit never writes",
       "fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_page99999_sm_80", "sm_80", *nvrtc,
       "kernel id 'fwd_sm80_bf16_hdqk64_hdv64_causal_nocap_bm64_bn64_w4_s2_page99999_sm_80': "
       "'page99999' is not page<N>"},
  };
  for (const Case &c : cases) {
    CubinRecord row = cubin("k", 64, c.nvrtc_version);
    row.kernel_id = c.kernel_id;
    row.arch = c.arch;
    row.blob_sha256 = sha256_of(row.bytes);
    const ReproductionResult r = reproduce_cubin(row);
    EXPECT_EQ(r.outcome, Reproduction::unverifiable) << c.what;
    EXPECT_EQ(r.detail, c.detail) << c.what;
    ++counts().db_verify;
  }
}

// Last (gtest runs a file's tests in order): the figures for docs/RELIABILITY.md.
TEST(BadInputCorpus, ZzAtLeastSixtyCases) {
  const Counts &c = counts();
  std::printf("bad-input corpus: %d cases (C++ API %d, C API %d, CLI %d, plan files %d, "
              "database import %d, database open %d, untrusted database %d, unverifiable "
              "cubin %d)\n",
              c.total(), c.cxx, c.c_api, c.cli, c.plan, c.db_import, c.db_open, c.db_trust,
              c.db_verify);
  ::testing::Test::RecordProperty("bad_input_cases", c.total());
  // Only a full run has tried every case.
  if (::testing::GTEST_FLAG(filter) == "*") {
    EXPECT_GE(c.total(), 60);
  }
}

}  // namespace
}  // namespace flashjit
