// The backward as a tuned class through the flashjit binary, without a GPU:
// --pass and --deterministic on tune, precompile and query (exact messages),
// a plan's `passes`, precompile of the backward programs into the store, and
// query reading "bwd" and "bwd-det" tunings of another machine apart.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cli_files.h"
#include "cli_runner.h"
#include "foreign_tuning.h"
#include "runtime/device.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {
namespace {

using namespace testing_cli;


TEST(CliBackwardTuning, UsageErrorsNameTheFlag) {
  TempDir dir;
  const std::string plan = dir.file("p.yaml");
  write_file(plan, "defaults: {heads: 16, hdim: 64}\nproblems:\n  - {seqlen: 1024, pass: bwd}\n");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"tune", "--plan", plan, "--pass", "bwd"},
       "--plan: the plan gives the problems; drop --pass"},
      {{"precompile", "--arch", "sm_80", "--plan", plan, "--deterministic"},
       "--plan: the plan gives the problems; drop --deterministic"},
      {{"tune", "--pass", "back"}, "--pass: expected fwd or bwd, got back"},
      {{"query", "--deterministic"},
       "--deterministic: expected --pass bwd (it only changes the backward), got --pass fwd"},
      {{"run", "--pass", "bwd", "--warmup", "-1"}, "--warmup: expected an integer >= 0, got -1"},
  };
  for (const auto &[args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[1];
    EXPECT_EQ(r.err, "flashjit: error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }
}

// A plan asking for both passes: one line per pass, each program stored
// once (a second precompile compiles nothing). hdim 64 on sm_80.
TEST(CliBackwardTuning, PrecompileStoresBothPassesOfAPlan) {
  TempDir dir;
  const std::string plan = dir.file("p.yaml"), db = dir.file("p.db");
  write_file(plan, "defaults: {heads: 16, hdim: 64}\n"
                   "problems:\n  - {seqlen: 1024, passes: [fwd, bwd], name: both}\n");
  const std::vector<std::string> args = {"precompile", "--arch", "sm_80", "--plan", plan,
                                         "--db", db, "--json"};
  CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object first = parse_json(r.out);
  const llvm::json::Array *entries = first.getArray("entries");
  ASSERT_NE(entries, nullptr);
  ASSERT_EQ(entries->size(), 2u);
  const llvm::json::Object &fwd = *(*entries)[0].getAsObject();
  const llvm::json::Object &bwd = *(*entries)[1].getAsObject();
  EXPECT_EQ(S(fwd.getString("name")), "both");
  EXPECT_EQ(S(fwd.getString("pass")), "fwd");
  EXPECT_EQ(S(bwd.getString("name")), "both (bwd)");
  EXPECT_EQ(S(bwd.getString("pass")), "bwd");
  // The sm80 backward grid on sm_80 at d=64: 24 configs, of which the traits
  // keep those that fit 163 KB and 200 accumulators per thread.
  EXPECT_EQ(I(bwd.getInteger("compiled")), 12);
  EXPECT_EQ(I(bwd.getInteger("failed")), 0);
  EXPECT_NE(r.err.find("[2/2] both (bwd): compiled 12, already stored 0, failed 0\n"),
            std::string::npos)
      << r.err;

  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object second = parse_json(r.out);
  EXPECT_EQ(I(second.getInteger("compiled")), 0);
  EXPECT_EQ(I(second.getInteger("already_stored")), I(first.getInteger("compiled")));

  r = run_cli({"db", "list", "--json", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object list = parse_json(r.out);
  int backward = 0;
  for (const llvm::json::Value &cubin : *list.getArray("cubins"))
    backward += llvm::StringRef(S(cubin.getAsObject()->getString("kernel_id"))).startswith("bwd_");
  EXPECT_EQ(backward, 12);

  // Nothing tuned: query --pass bwd names the heuristic's program, stored.
  r = run_cli({"query", "--pass", "bwd", "--arch", "sm_80", "--device-name", "Test GPU", "--db",
               db, "--heads", "16", "--hdim", "64", "--seqlen", "1024", "--batch", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("source     heuristic\nconfig     sm80 128x128 w8 s2\nkernel     "
                        "bwd_sm80_bf16_hdqk64_hdv64_none_nocap_bm128_bn128_w8_s2_sm_80\n",
                        0),
            0u)
      << r.out;
}

// A problem too big for the device's shared memory in every backward config
// fails its entry with the traits' reason.
TEST(CliBackwardTuning, PrecompileSaysWhyNoBackwardConfigFits) {
  TempDir dir;
  const CliResult r = run_cli({"precompile", "--pass", "bwd", "--arch", "sm_86", "--hdim", "256",
                               "--seqlen", "1024", "--db", dir.file("p.db")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.out,
            "[1/1] bf16 b=2 hq=16 hkv=16 sq=1024 sk=1024 d=256 dv=256 none (bwd): failed: no "
            "backward config fits bf16 b=2 hq=16 hkv=16 sq=1024 sk=1024 d=256 dv=256 none on "
            "sm_86: sm80 backward config (block_m=64 block_n=64 warps=8 stages=2, d=256 dv=256) "
            "is invalid: needs 214016 bytes of shared memory, the device allows 101376\n"
            "total: compiled 0, already stored 0, failed 0 (sm_86, " +
                dir.file("p.db") + ")\n");
}

TuningRecord backward_tuning(const SoftwareFingerprint &software, const char *pass,
                             const StoredConfig &config) {
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 4096;
  p.head_dim_qk = p.head_dim_v = 128;
  p.mask = MaskKind::causal;
  return testing::foreign_tuning(software, p, pass,
                                 {config, StoredConfig{"sm80", 64, 128, 8, 2}, 2.0, 1.9, 2.2, 2.5,
                                  300, 255, 98304, 14, 1});
}

TEST(CliBackwardTuning, QueryReadsBackwardTuningsByMode) {
  auto software = software_fingerprint();
  if (!software) GTEST_SKIP() << llvm::toString(software.takeError());
  TempDir dir;
  const std::string db_path = dir.file("q.db");
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    ASSERT_FALSE(bool((*db)->put_tuning(
        backward_tuning(*software, "bwd", StoredConfig{"sm80", 128, 64, 8, 2}))));
    ASSERT_FALSE(bool((*db)->put_tuning(
        backward_tuning(*software, "bwd-det", StoredConfig{"sm80", 64, 64, 8, 1}))));
  }
  const std::vector<std::string> base = {"query", "--arch", "sm_90a", "--device-name",
                                         "Test GPU 9000", "--db", db_path, "--causal",
                                         "--heads", "16", "--batch", "2", "--seqlen", "4096"};
  auto query = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args);
  };

  CliResult r = query({"--pass", "bwd"});
  ASSERT_EQ(r.code, 0) << r.err;
  // Then a note when there is no GPU here.
  EXPECT_EQ(r.out.substr(0, r.out.find("note ")),
            "source     tuned\n"
            "config     sm80 128x64 w8 s2\n"
            "kernel     bwd_sm80_bf16_hdqk128_hdv128_causal_nocap_bm128_bn64_w8_s2_sm_90a\n"
            "measured   300.0 TFLOP/s, median 2.000 ms (min 1.900, max 2.200)\n"
            "gain       1.25x over the heuristic (sm80 64x128 w8 s2, 2.500 ms)\n"
            "resources  occupancy 1.00 CTAs/SM, 255 registers, 98304 bytes smem, 0 bytes spills\n"
            "search     14 candidates tried, 1 failed\n"
            "tuned      2026-11-29T12:00:00Z on Test GPU 9000 (cc 9.0, 132 SMs, driver 13.0)\n"
            "software   NVRTC " +
                software->nvrtc_version + ", templates " + software->templates_hash +
                ", flashjit " FLASHJIT_VERSION "\n"
                "shape       bwd bf16 d=128/128 causal gqa=1 sq<=2^12 sk<=2^12 bh<=2^5 (bf16 b=2 "
                "hq=16 hkv=16 sq=4096 sk=4096 d=128 dv=128 causal)\n"
                "database   " +
                db_path + ": trusted (only you and root can write it)\n")
      << r.out;

  r = query({"--pass", "bwd", "--deterministic", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "tuned");
  EXPECT_EQ(S(o.getString("kernel_id")),
            "bwd_sm80_bf16_hdqk128_hdv128_causal_nocap_bm64_bn64_w8_s1_det_sm_90a");
  EXPECT_EQ(S(o.getObject("class")->getString("pass")), "bwd-det");

  // The forward's class has no tuning: the backward's are not its.
  r = query({"--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "heuristic");
  EXPECT_EQ(S(o.getObject("class")->getString("pass")), "fwd");

  // Another bucket of the backward class: the 4096 tuning corrected a
  // heuristic (sm80 64x128 w8 s2) this size does not get, so it is passed
  // over; a tuning of the size's own heuristic is the nearest one.
  std::vector<std::string> args = base;
  args.back() = "16384";
  args.insert(args.end(), {"--pass", "bwd", "--json"});
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "heuristic") << r.out;
  ASSERT_NE(o.getObject("config"), nullptr);
  const StoredConfig here = testing::json_tiles(o.getObject("config"));
  ASSERT_NE(here, (StoredConfig{"sm80", 64, 128, 8, 2}));
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    TuningRecord r8k = backward_tuning(*software, "bwd", StoredConfig{"sm80", 64, 64, 8, 2});
    r8k.problem.seqlen_q_bucket = r8k.problem.seqlen_k_bucket = 13;
    r8k.heuristic_config = here;
    ASSERT_FALSE(bool((*db)->put_tuning(r8k)));
  }
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(source_and_tiles(parse_json(r.out)), "nearest sm80 64x64 w8 s2") << r.out;
}

// On Hopper, query says why a class runs the sm80 family: a head dim or a
// mode the sm90 kernels do not serve.
TEST(CliQuery, SaysWhyTheSm80FamilyRunsOnHopper) {
  TempDir dir;
  const std::string db = dir.file("q.db");
  struct Case {
    std::vector<std::string> flags;
    std::string kernel, note;
  };
  const Case cases[] = {
      {{"--hdim", "24"},
       "fwd_sm80_bf16_hdqk24_hdv24_none_nocap_bm128_bn128_w4_s2_sm_90a",
       "sm80 family: head_dim=24: the sm90 kernel serves head dims that are multiples of 8 "
       "from 32 to 576 (16-byte TMA rows, tiled as 64, 128, 192, 256, then whole 64 columns)"},
      // Past 256: two consumer warpgroups per 64 rows (12 warps at 64 rows).
      {{"--hdim", "512"}, "fwd_sm90_bf16_hdqk512_hdv512_none_nocap_bm64_bn32_w12_s2_sm_90a", ""},
      {{"--hdim", "576", "--hdim-v", "512"},
       "fwd_sm90_bf16_hdqk576_hdv512_none_nocap_bm64_bn32_w12_s2_sm_90a",
       ""},
      // Head dims between 64, 128 and 256 are tiled as the next of them.
      {{"--hdim", "96"}, "fwd_sm90_bf16_hdqk96_hdv96_none_nocap_bm128_bn160_w12_s2_sm_90a", ""},
      {{"--pass", "bwd", "--hdim", "192"},
       "bwd_sm90_bf16_hdqk192_hdv192_none_nocap_bm64_bn64_w12_s2_sm_90a",
       ""},
      // 192/128: 128 keys a CTA in every mode (the head-dim split's 64 with
      // a caller's modifiers).
      {{"--pass", "bwd", "--hdim", "192", "--hdim-v", "128"},
       "bwd_sm90_bf16_hdqk192_hdv128_none_nocap_bm64_bn128_w12_s1_sm_90a",
       ""},
      {{"--pass", "bwd", "--hdim", "192", "--hdim-v", "128", "--causal"},
       "bwd_sm90_bf16_hdqk192_hdv128_causal_nocap_bm64_bn128_w12_s1_sm_90a",
       ""},
      {{"--pass", "bwd", "--hdim", "192", "--hdim-v", "128", "--causal", "--deterministic"},
       "bwd_sm90_bf16_hdqk192_hdv128_causal_nocap_bm64_bn128_w12_s1_det_sm_90a",
       ""},
      {{"--pass", "bwd", "--hdim", "256", "--hdim-v", "64"},
       "bwd_sm80_bf16_hdqk256_hdv64_none_nocap_bm64_bn64_w8_s2_sm_90a",
       "sm80 family: head_dim_qk=256, head_dim_v=64: the sm90 backward splits a head dim tiled "
       "as 256 between its warpgroups, and then needs the other tiled as 128 or more (over 64)"},
      {{"--pass", "bwd", "--hdim", "24"},
       "bwd_sm80_bf16_hdqk24_hdv24_none_nocap_bm128_bn128_w8_s2_sm_90a",
       "sm80 family: head_dim=24: the sm90 backward serves head dims that are multiples of 8 "
       "from 32 to 256 (16-byte TMA rows, tiled as 32, 64, 96, 128, 192 or "
       "256)"},
      {{"--pass", "bwd", "--hdim", "256"},
       "bwd_sm90_bf16_hdqk256_hdv256_none_nocap_bm64_bn64_w12_s1_sm_90a",
       ""},
      {{"--pass", "bwd", "--deterministic"},
       "bwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w12_s2_det_sm_90a",
       ""},
      {{"--pass", "bwd", "--deterministic", "--hdim", "24"},
       "bwd_sm80_bf16_hdqk24_hdv24_none_nocap_bm128_bn128_w8_s2_det_sm_90a",
       "sm80 family: head_dim=24: the sm90 backward serves head dims that are multiples of 8 "
       "from 32 to 256 (16-byte TMA rows, tiled as 32, 64, 96, 128, 192 or "
       "256)"},
      {{"--pass", "bwd"}, "bwd_sm90_bf16_hdqk128_hdv128_none_nocap_bm64_bn128_w12_s2_sm_90a", ""},
  };
  for (const Case &c : cases) {
    std::vector<std::string> args = {"query", "--arch", "sm_90a", "--db", db};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("kernel     " + c.kernel + "\n"), std::string::npos) << r.out;
    const size_t note = r.out.find("note       sm80 family: ");
    if (c.note.empty()) {
      EXPECT_EQ(note, std::string::npos) << r.out;
    } else {
      EXPECT_NE(r.out.find("note       " + c.note + "\n"), std::string::npos) << r.out;
    }
  }
}

}  // namespace
}  // namespace flashjit
