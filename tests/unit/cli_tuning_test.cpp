// The tuning commands of the built `flashjit` binary, without a GPU: usage
// errors with their exact messages, tune's clear refusal, precompile into a
// temporary database, query (heuristic, tuned, nearest) from a database
// filled "elsewhere", and db export/import between two databases.
#include <cstdlib>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "gtest/gtest.h"
#include "cli_files.h"
#include "cli_runner.h"
#include "tuning_db_test_util.h"
#include "foreign_tuning.h"
#include "runtime/device.h"
#include "runtime/tuning_key.h"
#include "llvm/ADT/Optional.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

namespace flashjit {
namespace {

using namespace testing_cli;


TEST(CliTuning, UsageErrorsNameTheFlag) {
  TempDir dir;
  const std::string plan = dir.file("bad.yaml");
  write_file(plan, "name: bad\ndefaults: {heads: 16}\nproblems:\n  - {seqlen: 1024, hdim: 100}\n");
  const std::pair<std::vector<std::string>, std::string> cases[] = {
      {{"tune", "--devices", "x"},
       "--devices: expected all or a list of GPU ordinals like 0,1, got x"},
      {{"tune", "--devices", "0,0"},
       "--devices: expected all or a list of GPU ordinals like 0,1, got 0,0"},
      {{"tune", "--budget-s", "0"}, "--budget-s: expected a positive number of seconds, got 0"},
      {{"tune", "--candidate-timeout-s", "-5"},
       "--candidate-timeout-s: expected a positive number of seconds, got -5"},
      {{"tune", "--plan", plan, "--hdim", "64"}, "--plan: the plan gives the problems; drop --hdim"},
      {{"tune", "--hdim", "100"}, "--hdim: expected a multiple of 8 in [8, 576], got 100"},
      {{"precompile", "--hdim", "64"},
       "--arch: required: the GPU architecture to compile for, e.g. sm_90a"},
      {{"precompile", "--arch", "sm_90a", "--plan", plan},
       plan + ":4: key 'hdim': expected a multiple of 8 in [8, 576], got 100"},
      {{"precompile", "--arch", "sm_90a", "--plan", dir.file("none.yaml")},
       dir.file("none.yaml") + ": cannot read: No such file or directory"},
      {{"query", "--heads", "16", "--heads-kv", "5"},
       "--heads-kv: expected a divisor of --heads (16), got 5"},
      {{"db"}, "db: expected list, export FILE, import FILE, verify or prune"},
      {{"db", "drop"}, "db: expected list, export FILE, import FILE, verify or prune, got drop"},
      {{"db", "export"}, "db export: expected a FILE"},
      {{"db", "list", "x"}, "db list: unexpected argument 'x'"},
      {{"db", "list", "--with-cubins"}, "--with-cubins: only for db export"},
      {{"db", "prune", "--unused-days=x"}, "--unused-days: expected an integer >= 0, got x"},
  };
  for (const auto &[args, message] : cases) {
    const CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args[0] << " " << args[1];
    EXPECT_EQ(r.err, "flashjit: error: " + message + "\n");
    EXPECT_EQ(r.out, "");
  }
  // Config flags are not tune's: it searches the configs itself.
  const CliResult r = run_cli({"tune", "--block-m", "64"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("flashjit: error: Unknown command line argument '--block-m'", 0), 0u)
      << r.err;
}

TEST(CliTuning, TuneWithoutAGpuIsAClearRuntimeError) {
  if (gpu_present()) GTEST_SKIP() << "a GPU is present";
  TempDir dir;
  const CliResult r = run_cli({"tune", "--hdim", "64", "--db", dir.file("t.db")});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("flashjit: error: tune needs a GPU (", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("); without one, `flashjit precompile --arch sm_90a` fills the cubin "
                       "store\n"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// hdim 256 on sm_86 (99 KB of shared memory) leaves very few candidates: a
// fast real precompile.
// precompile's kernels compile in worker processes: what they store must
// be the kernel a call of that class runs (its id, so its cubin key), for
// element types past the default too (an fp16 class once stored bf16
// kernels, an e4m3 one kernels with bf16 K/V that overflowed shared memory).
TEST(CliTuning, PrecompileStoresTheKernelsOfFp16AndE4m3Classes) {
  for (const std::vector<std::string> &problem :
       {std::vector<std::string>{"--arch", "sm_86", "--dtype", "fp16", "--hdim", "256",
                                 "--seqlen", "1024"},
        std::vector<std::string>{"--arch", "sm_90a", "--dtype", "e4m3", "--hdim", "256",
                                 "--varlen", "--seqlens-q", "100,900"}}) {
    TempDir dir;
    const std::string db = dir.file("p.db");
    std::vector<std::string> args = {"precompile", "--db", db, "--json"};
    args.insert(args.end(), problem.begin(), problem.end());
    CliResult r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    llvm::json::Object outcome = parse_json(r.out);
    EXPECT_GE(I(outcome.getInteger("compiled")), 1) << r.out;
    EXPECT_EQ(I(outcome.getInteger("failed")), 0) << r.out << r.err;

    args = {"query", "--device-name", "Test GPU 9000", "--json", "--db", db};
    args.insert(args.end(), problem.begin(), problem.end());
    r = run_cli(args);
    ASSERT_EQ(r.code, 0) << r.err;
    const std::string kernel_id = S(parse_json(r.out).getString("kernel_id"));
    ASSERT_FALSE(kernel_id.empty()) << r.out;
    r = run_cli({"db", "list", "--json", "--db", db});
    ASSERT_EQ(r.code, 0) << r.err;
    llvm::json::Object list = parse_json(r.out);
    ASSERT_NE(list.getArray("cubins"), nullptr);
    bool stored = false;
    for (const llvm::json::Value &cubin : *list.getArray("cubins")) {
      const std::string id = S(cubin.getAsObject()->getString("kernel_id"));
      stored |= id == kernel_id;
      EXPECT_EQ(id.find("_kvbf16"), std::string::npos) << id;
    }
    EXPECT_TRUE(stored) << kernel_id << " is not among the stored kernels";
  }
}

TEST(CliTuning, PrecompileFillsTheCubinStoreOnce) {
  TempDir dir;
  const std::string db = dir.file("p.db");
  const std::vector<std::string> problem = {"--hdim", "256", "--seqlen", "1024"};
  std::vector<std::string> args = {"precompile", "--arch", "sm_86", "--db", db, "--json"};
  args.insert(args.end(), problem.begin(), problem.end());
  CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object first = parse_json(r.out);
  const int64_t compiled = I(first.getInteger("compiled"));
  EXPECT_GE(compiled, 1);
  EXPECT_EQ(I(first.getInteger("failed")), 0);
  EXPECT_NE(r.err.find("total: compiled "), std::string::npos) << r.err;

  r = run_cli(args);  // everything is stored now: nothing compiles
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object second = parse_json(r.out);
  EXPECT_EQ(I(second.getInteger("compiled")), 0);
  EXPECT_EQ(I(second.getInteger("already_stored")), compiled);

  r = run_cli({"db", "list", "--json", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object list = parse_json(r.out);
  ASSERT_NE(list.getArray("cubins"), nullptr);
  EXPECT_EQ(int64_t(list.getArray("cubins")->size()), compiled);
  EXPECT_EQ(list.getArray("tunings")->size(), 0u);

  // Nothing is tuned: the heuristic's kernel, which precompile stored.
  args = {"query", "--arch", "sm_86", "--device-name", "Test GPU 9000", "--json", "--db", db};
  args.insert(args.end(), problem.begin(), problem.end());
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object query = parse_json(r.out);
  EXPECT_EQ(S(query.getString("source")), "heuristic");
  EXPECT_EQ(query.getObject("measurements"), nullptr);
  const auto kernel_id = query.getString("kernel_id");
  ASSERT_TRUE(kernel_id.hasValue());
  EXPECT_FALSE(kernel_id->empty());
  bool stored = false;
  for (const llvm::json::Value &cubin : *list.getArray("cubins"))
    stored |= S(cubin.getAsObject()->getString("kernel_id")) == *kernel_id;
  EXPECT_TRUE(stored) << kernel_id->str();

  r = run_cli({"info", "--db", db});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Database: " + db + " (0 tunings, " + std::to_string(compiled) + " cubins)"),
            std::string::npos)
      << r.out;
}

// A tuning as one from another machine: a GPU this host does not have.
TuningRecord stored_tuning(const SoftwareFingerprint &software) {
  Problem p;
  p.batch = 2;
  p.heads_q = p.heads_kv = 16;
  p.seqlen_q = p.seqlen_k = 4096;
  p.mask = MaskKind::causal;
  return testing::foreign_tuning(software, p, "fwd",
                                 {StoredConfig{"sm80", 128, 64, 4, 2},
                                  StoredConfig{"sm80", 128, 128, 8, 2}, 0.5, 0.49, 0.52, 0.6, 350,
                                  200, 49152, 20, 2});
}

TEST(CliTuning, QueryReadsTuningsOfAnotherMachine) {
  auto software = software_fingerprint();
  if (!software) GTEST_SKIP() << llvm::toString(software.takeError());
  TempDir dir;
  const std::string db_path = dir.file("q.db");
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    ASSERT_FALSE(bool((*db)->put_tuning(stored_tuning(*software))));
  }
  const std::vector<std::string> base = {"query", "--arch", "sm_90a", "--device-name",
                                         "Test GPU 9000", "--json", "--db", db_path,
                                         "--causal", "--heads", "16", "--batch", "2"};
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--seqlen", "4096"});
  CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "tuned") << r.out;
  const llvm::json::Object *config = o.getObject("config");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(I(config->getInteger("block_m")), 128);
  EXPECT_EQ(I(config->getInteger("block_n")), 64);
  EXPECT_EQ(S(config->getString("path")), "sm80");
  // A stored config without the decode fields ran neither.
  EXPECT_EQ(I(config->getInteger("splits")), 1);
  EXPECT_EQ(S(config->getString("pack_gqa")), "off");
  ASSERT_NE(o.getObject("measurements"), nullptr) << r.out;
  EXPECT_EQ(I(o.getObject("measurements")->getObject("heuristic_config")->getInteger("splits")), 1);
  EXPECT_EQ(D(o.getObject("measurements")->getNumber("tflops")), 350);
  EXPECT_EQ(I(o.getObject("measurements")->getInteger("candidates_tried")), 20);
  ASSERT_NE(o.getObject("provenance"), nullptr);
  EXPECT_EQ(S(o.getObject("provenance")->getString("tuned_at")), "2026-11-29T12:00:00Z");
  EXPECT_EQ(S(o.getObject("provenance")->getObject("device")->getString("name")), "Test GPU 9000");
  EXPECT_EQ(S(o.getString("kernel_id")),
            "fwd_sm80_bf16_hdqk128_hdv128_causal_nocap_bm128_bn64_w4_s2_sm_90a");

  // Another bucket of the same class: the 4096 tuning corrected a heuristic
  // (sm80 128x128 w8 s2) that is not the one this size gets, so it is
  // passed over, and query says so.
  args = base;
  args.insert(args.end(), {"--seqlen", "16384"});
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "heuristic") << r.out;
  const StoredConfig here = testing::json_tiles(o.getObject("config"));
  ASSERT_NE(here, (StoredConfig{"sm80", 128, 128, 8, 2}));
  const std::string here_tiles = config_text(here);
  ASSERT_NE(o.getArray("notes"), nullptr) << r.out;
  EXPECT_EQ(S(o.getArray("notes")->back().getAsString()),
            "1 nearest entry passed over, tuned where the heuristic picks other tiles than its " +
                here_tiles +
                " here (first: bf16 b=2 hq=16 hkv=16 sq=4096 sk=4096 d=128 dv=128 causal: the "
                "heuristic picked sm80 128x128 w8 s2 there)")
      << r.out;

  // A farther bucket tuned where the heuristic picked this size's tiles
  // serves it (nearest), past the nearer one.
  {
    Problem far;
    far.batch = 2;
    far.heads_q = far.heads_kv = 16;
    far.seqlen_q = far.seqlen_k = 1024;
    far.mask = MaskKind::causal;
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    ASSERT_FALSE(bool((*db)->put_tuning(
        testing::foreign_tuning(*software, far, "fwd",
                                {StoredConfig{"sm80", 64, 64, 4, 2}, here, 0.5, 0.49, 0.52, 0.6,
                                 350, 200, 49152, 20, 2}))));
  }
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  o = parse_json(r.out);
  EXPECT_EQ(source_and_tiles(o), "nearest sm80 64x64 w4 s2") << r.out;
  EXPECT_NE(o.getObject("provenance"), nullptr);

  args = base;
  args.insert(args.end(), {"--seqlen", "4096", "--hdim", "64"});  // another class
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(S(parse_json(r.out).getString("source")), "heuristic") << r.out;

  args = base;
  args.erase(args.begin() + 5);  // plain text
  args.insert(args.end(), {"--seqlen", "4096"});
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("source     tuned\nconfig     sm80 128x64 w4 s2\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("gain       1.20x over the heuristic (sm80 128x128 w8 s2, 0.600 ms)"),
            std::string::npos)
      << r.out;
}

// A decode tuning (sm90, split keys, packed heads) as query prints it: the
// JSON config's splits and pack_gqa, and the text line naming both.
TEST(CliTuning, QueryReportsSplitsAndPackGqa) {
  auto software = software_fingerprint();
  if (!software) GTEST_SKIP() << llvm::toString(software.takeError());
  TempDir dir;
  const std::string db_path = dir.file("decode.db");
  Problem p;
  p.batch = 4;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.seqlen_q = 1;
  p.seqlen_k = 8192;
  {
    auto db = TuningDb::open(db_path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    ASSERT_FALSE(bool((*db)->put_tuning(testing::foreign_tuning(
        *software, p, "fwd",
        {StoredConfig{"sm90", 128, 128, 12, 2, 8, "on"}, StoredConfig{"sm90", 128, 128, 12, 2, 4, "on"},
         0.02, 0.019, 0.021, 0.03, 2, 128, 200000, 30, 0}))));
  }
  std::vector<std::string> args = {"query", "--arch", "sm_90a", "--device-name", "Test GPU 9000",
                                   "--json", "--db", db_path, "--batch", "4", "--heads", "32",
                                   "--heads-kv", "8", "--seqlen-q", "1", "--seqlen-k", "8192"};
  CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "tuned") << r.out;
  const llvm::json::Object *config = o.getObject("config");
  ASSERT_NE(config, nullptr) << r.out;
  EXPECT_EQ(I(config->getInteger("splits")), 8);
  EXPECT_EQ(S(config->getString("pack_gqa")), "on");
  const llvm::json::Object *heuristic =
      o.getObject("measurements") ? o.getObject("measurements")->getObject("heuristic_config")
                                  : nullptr;
  ASSERT_NE(heuristic, nullptr) << r.out;
  EXPECT_EQ(I(heuristic->getInteger("splits")), 4);
  EXPECT_EQ(S(heuristic->getString("pack_gqa")), "on");

  args.erase(args.begin() + 5);  // plain text
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("config     sm90 128x128 w12 s2 splits=8 pack_gqa\n"), std::string::npos)
      << r.out;

  // Not tuned (another class): the heuristic's, with both fields concrete.
  args = {"query", "--arch", "sm_90a", "--json", "--db", db_path, "--batch", "4", "--heads",
          "32", "--heads-kv", "8", "--seqlen-q", "1", "--seqlen-k", "8192", "--hdim", "64"};
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  o = parse_json(r.out);
  EXPECT_EQ(S(o.getString("source")), "heuristic") << r.out;
  config = o.getObject("config");
  ASSERT_NE(config, nullptr) << r.out;
  EXPECT_GE(I(config->getInteger("splits")), 1) << r.out;
  const std::string packing = S(config->getString("pack_gqa"));
  EXPECT_TRUE(packing == "on" || packing == "off") << r.out;
}

TEST(CliTuning, ExportImportRoundTrip) {
  auto software = software_fingerprint();
  if (!software) GTEST_SKIP() << llvm::toString(software.takeError());
  TempDir dir;
  // This user's origin key (which signs the export) in the test's folder.
  testing_db::ScopedEnv key("FLASHJIT_ORIGIN_KEY", dir.file("origin.key").c_str());
  const std::string from = dir.file("from.db"), to = dir.file("to.db");
  const std::string yaml = dir.file("tunings.yaml"), with_cubins = dir.file("all.yaml");
  {
    auto db = TuningDb::open(from);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    ASSERT_FALSE(bool((*db)->put_tuning(stored_tuning(*software))));
    CubinRecord cubin;
    cubin.key = std::string(64, 'a');
    cubin.kernel_id = "fwd_test";
    cubin.arch = "sm_90a";
    cubin.nvrtc_version = software->nvrtc_version;
    const llvm::StringRef bytes("\x7f" "ELF fake cubin");
    cubin.bytes.assign(bytes.begin(), bytes.end());
    ASSERT_FALSE(bool((*db)->put_cubin(cubin)));
  }
  CliResult r = run_cli({"db", "export", yaml, "--db", from});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "exported 1 tunings to " + yaml + "\n");
  r = run_cli({"db", "export", with_cubins, "--with-cubins", "--db", from});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "exported 1 tunings and 1 cubins to " + with_cubins + "\n");

  r = run_cli({"db", "import", yaml, "--db", to});
  ASSERT_EQ(r.code, 0) << r.err;
  // Where it came from first: this user's database, unsigned (no cubins).
  EXPECT_EQ(r.out.rfind("origin: ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(from + ", exported "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" (unsigned)\ntunings: 1 added, 0 replaced\ncubins: 0 added, 0 replaced\n"),
            std::string::npos)
      << r.out;
  r = run_cli({"db", "import", yaml, "--db", to});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\ntunings: 0 added, 1 replaced\n"), std::string::npos) << r.out;

  // Cubins are code: they come in only when asked for.
  r = run_cli({"db", "import", with_cubins, "--db", to});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cubins: 0 added"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("skipped: 0\n"), std::string::npos) << r.out;
  r = run_cli({"db", "import", with_cubins, "--accept-cubins", "--db", to});
  ASSERT_EQ(r.code, 0) << r.err;
  // This user's own export (its signature checks): stored as it comes.
  EXPECT_NE(r.out.find("(this user's own export: its signature checks)\n"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("cubins: 1 added, 0 replaced (your own export: not recompiled)\n"
                       "skipped: 0\n"),
            std::string::npos)
      << r.out;

  r = run_cli({"db", "list", "--json", "--db", to});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object list = parse_json(r.out);
  ASSERT_EQ(list.getArray("tunings")->size(), 1u);
  const llvm::json::Object &t = *(*list.getArray("tunings"))[0].getAsObject();
  EXPECT_EQ(S(t.getObject("device")->getString("name")), "Test GPU 9000");
  EXPECT_EQ(I(t.getObject("config")->getInteger("block_n")), 64);
  ASSERT_EQ(list.getArray("cubins")->size(), 1u);
  EXPECT_EQ(S((*list.getArray("cubins"))[0].getAsObject()->getString("kernel_id")), "fwd_test");
}

}  // namespace
}  // namespace flashjit
