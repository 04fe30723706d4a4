// Verification by reproduction: whether NVRTC writes the same cubin twice
// (it does, but for the line table's working directory), how two cubins
// are compared (runtime/cubin_comparison.h), and what a stored row's
// recompile says (tuner/cubin_reproduction.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cli_runner.h"
#include "flashjit/forward.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "runtime/cubin_comparison.h"
#include "runtime/kernel_source.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/tuning_key.h"
#include "tuner/cubin_reproduction.h"
#include "tuning_db_test_util.h"
#include "llvm/Support/SHA256.h"
#include "llvm/ADT/StringExtras.h"

namespace flashjit {
namespace {

using namespace testing_db;

std::vector<char> bytes_of(const std::string &text) { return {text.begin(), text.end()}; }

// ---- quick: no compile -------------------------------------------------------

TEST(CubinComparison, MalformedFilesDifferAndNeverCrash) {
  std::string header(64, '\0');
  header.replace(0, 4, "\x7f" "ELF");
  header[4] = 2;  // 64-bit
  header[5] = 1;  // little-endian
  std::string far_table = header;
  const uint64_t far = uint64_t(1) << 40;
  std::memcpy(&far_table[0x28], &far, sizeof far);  // e_shoff
  far_table[0x3c] = 5;                               // e_shnum
  far_table[0x3a] = 64;                              // e_shentsize
  std::string thirty_two_bit = header;
  thirty_two_bit[4] = 1;
  const std::pair<std::string, std::string> cases[] = {
      {"hello", "the stored cubin is not an ELF file"},
      {"\x7f" "ELF", "the stored cubin is not an ELF file"},
      {thirty_two_bit, "the stored cubin is not a 64-bit little-endian ELF file"},
      {far_table, "the stored cubin is its program or section header table lies outside the file"},
  };
  for (const auto &[stored, detail] : cases) {
    const CubinComparison c = compare_cubins(bytes_of(stored), bytes_of(header + "x"));
    EXPECT_FALSE(c.same);
    EXPECT_FALSE(c.identical);
    EXPECT_EQ(c.detail, detail);
  }
  const CubinComparison rebuilt_bad = compare_cubins(bytes_of(header), bytes_of("junk"));
  EXPECT_FALSE(rebuilt_bad.same);
  EXPECT_EQ(rebuilt_bad.detail, "the recompiled cubin is not an ELF file");
  const CubinComparison same = compare_cubins(bytes_of("abc"), bytes_of("abc"));
  EXPECT_TRUE(same.same);
  EXPECT_TRUE(same.identical);
}

// ---- compile suite -----------------------------------------------------------

// One kernel compiled by `flashjit compile` (a process of its own each
// time) in a folder: through a shell, since the runner keeps the test's
// working directory.
std::string compile_in_folder(const std::string &folder, const std::string &arch,
                              const std::string &hdim) {
  const std::string out = folder + "/k.cubin";
  const std::string command = "cd '" + folder + "' && FLASHJIT_DB=off '" +
                              testing_cli::cli_path() + "' compile --arch " + arch + " --hdim " +
                              hdim + " --causal -o k.cubin > /dev/null";
  testing_cli::CliResult r = {};
  const std::vector<llvm::StringRef> argv = {"/bin/sh", "-c", command};
  std::string message;
  r.code = llvm::sys::ExecuteAndWait("/bin/sh", argv, llvm::None, {}, 300, 0, &message);
  EXPECT_EQ(r.code, 0) << message;
  return read_bytes(out);
}

class CubinReproduction : public ::testing::Test {
 protected:
  void SetUp() override {
    auto version = nvrtc_version();
    if (!version) GTEST_SKIP() << "no NVRTC: " << llvm::toString(version.takeError());
    nvrtc_ = *version;
  }
  std::string nvrtc_;
};

// The finding the comparison rests on: NVRTC 13.0 writes the same bytes for
// the same program in two processes of one folder, and in another folder
// differs only in the DWARF line table, which names the working directory.
TEST_F(CubinReproduction, NvrtcRepeatsItselfButForTheLineTablesFolder) {
  TempDir a, b;
  const std::string folder_a = a.file("x"), folder_b = b.file("a-longer-folder-name");
  ASSERT_FALSE(llvm::sys::fs::create_directories(folder_a));
  ASSERT_FALSE(llvm::sys::fs::create_directories(folder_b));
  for (const auto &[arch, hdim, relocations] :
       {std::tuple<const char *, const char *, const char *>{"sm_80", "32", ".rel.debug_line"},
        {"sm_90a", "64", ".rela.debug_line"}}) {
    const std::string first = compile_in_folder(folder_a, arch, hdim);
    const std::string again = compile_in_folder(folder_a, arch, hdim);
    const std::string elsewhere = compile_in_folder(folder_b, arch, hdim);
    ASSERT_GT(first.size(), 1000u) << arch;
    EXPECT_EQ(first, again) << arch << ": two processes in one folder";
    EXPECT_NE(first, elsewhere) << arch << ": the line table names the folder";
    EXPECT_NE(elsewhere.find(folder_b), std::string::npos) << arch;
    const CubinComparison c = compare_cubins(bytes_of(first), bytes_of(elsewhere));
    EXPECT_TRUE(c.same) << arch << ": " << c.detail;
    EXPECT_FALSE(c.identical) << arch;
    EXPECT_EQ(c.detail, std::string("identical but for .debug_line and ") + relocations +
                            " (the line table names the compiling process's working directory)")
        << arch;
  }
}

KernelSpec small_spec(int block_m) {
  Problem p;
  p.head_dim_qk = p.head_dim_v = 32;
  p.mask = MaskKind::causal;
  auto spec = make_forward_spec(p, {KernelPath::sm80, block_m, 64, 4, 2, false, 1, GqaPacking::off},
                                {8, 0, false});
  EXPECT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  return spec ? *spec : KernelSpec{};
}

// A section's bytes, found by name in an ELF64 cubin (for planting changes).
std::pair<size_t, size_t> section_range(const std::vector<char> &elf, llvm::StringRef name) {
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  std::memcpy(&shoff, &elf[0x28], 8);
  std::memcpy(&shentsize, &elf[0x3a], 2);
  std::memcpy(&shnum, &elf[0x3c], 2);
  std::memcpy(&shstrndx, &elf[0x3e], 2);
  auto field = [&](int i, int at, auto &out) {
    std::memcpy(&out, &elf[shoff + uint64_t(i) * shentsize + at], sizeof out);
  };
  uint64_t names = 0;
  field(shstrndx, 24, names);
  for (int i = 0; i < shnum; ++i) {
    uint32_t n = 0;
    uint64_t offset = 0, size = 0;
    field(i, 0, n);
    field(i, 24, offset);
    field(i, 32, size);
    if (llvm::StringRef(&elf[names + n]) == name) return {size_t(offset), size_t(size)};
  }
  return {0, 0};
}

TEST_F(CubinReproduction, AChangedSectionIsNamed) {
  auto cubin = compile_to_cubin(generate_forward(small_spec(64)), {8, 0, false});
  ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  const std::vector<char> &good = cubin->bytes;
  const std::string text = "section .text.flashjit_fwd_sm80";

  std::vector<char> code = good;
  auto [text_at, text_size] = section_range(code, ".text.flashjit_fwd_sm80");
  ASSERT_GT(text_size, 0x40u);
  code[text_at + 0x40] ^= 1;
  CubinComparison c = compare_cubins(code, good);
  EXPECT_FALSE(c.same);
  EXPECT_EQ(c.detail, text + " differs at byte 0x40");

  // The line table only: the same program.
  std::vector<char> lines = good;
  auto [line_at, line_size] = section_range(lines, ".debug_line");
  ASSERT_GT(line_size, 0u);
  lines[line_at + line_size - 1] ^= 1;
  c = compare_cubins(lines, good);
  EXPECT_TRUE(c.same) << c.detail;
  EXPECT_FALSE(c.identical);

  // Another kernel altogether (what a replaced blob is).
  auto other = compile_to_cubin(generate_forward(small_spec(128)), {8, 0, false});
  ASSERT_TRUE(bool(other)) << llvm::toString(other.takeError());
  c = compare_cubins(other->bytes, good);
  EXPECT_FALSE(c.same);
  EXPECT_NE(c.detail.find("section"), std::string::npos) << c.detail;
}

// A row as stored_cubin writes it.
CubinRecord stored_row(TuningDb &db, const KernelSpec &spec) {
  auto source = forward_cubin(spec, &db);
  EXPECT_TRUE(bool(source)) << llvm::toString(source.takeError());
  auto row = db.get_cubin(source ? source->key : "");
  EXPECT_TRUE(row && row->has_value());
  return row && *row ? **row : CubinRecord{};
}

std::string sha256_hex(const std::vector<char> &bytes) {
  return llvm::toHex(llvm::SHA256::hash(llvm::ArrayRef<uint8_t>(
                         reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size())),
                     true);
}

// A kernel's second request reads its stored cubin: the time counts as the
// database's (runtime_stats), and nothing compiles.
TEST_F(CubinReproduction, AStoredCubinIsReadAndTimedNotCompiled) {
  TempDir dir;
  auto db = open_ok(dir.file("timed.db"));
  auto first = forward_cubin(small_spec(64), &*db);
  ASSERT_TRUE(bool(first)) << llvm::toString(first.takeError());
  EXPECT_TRUE(first->compiled);
  const RuntimeStats before = runtime_stats();
  auto second = forward_cubin(small_spec(64), &*db);
  ASSERT_TRUE(bool(second)) << llvm::toString(second.takeError());
  const RuntimeStats after = runtime_stats();
  EXPECT_FALSE(second->compiled);
  EXPECT_EQ(second->bytes, first->bytes);
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.compile_ns, before.compile_ns);
  EXPECT_GT(after.database_ns, before.database_ns);
}

TEST_F(CubinReproduction, ARowReproducesOrSaysWhyNot) {
  TempDir dir;
  auto db = open_ok(dir.file("rows.db"));
  const CubinRecord row = stored_row(*db, small_spec(64));
  const CubinRecord other = stored_row(*db, small_spec(128));

  ReproductionResult r = reproduce_cubin(row);
  EXPECT_EQ(r.outcome, Reproduction::reproduced) << r.detail;
  EXPECT_EQ(r.detail, "identical");
  EXPECT_EQ(r.rebuilt, row.bytes);

  // Another valid cubin under this row's key, its hash recomputed.
  CubinRecord replaced = row;
  replaced.bytes = other.bytes;
  replaced.blob_sha256 = sha256_hex(other.bytes);
  r = reproduce_cubin(replaced);
  EXPECT_EQ(r.outcome, Reproduction::differs);
  EXPECT_NE(r.detail.find("section"), std::string::npos) << r.detail;
  EXPECT_EQ(r.rebuilt, row.bytes) << "what the key names, for --repair";

  CubinRecord corrupted = row;
  corrupted.bytes[100] ^= 1;
  r = reproduce_cubin(corrupted);
  EXPECT_EQ(r.outcome, Reproduction::differs);
  EXPECT_EQ(r.detail, "its blob does not hash to its blob_sha256 (corrupted: calls refuse it)");

  struct Case {
    const char *what;
    std::function<void(CubinRecord &)> edit;
    std::string detail;
  };
  const Case cases[] = {
      {"another NVRTC", [](CubinRecord &c) { c.nvrtc_version = "12.8"; },
       "it was compiled by NVRTC 12.8; this machine has NVRTC " + nvrtc_ +
           ", whose output differs (and whose calls never load it)"},
      {"a caller's modifiers",
       [](CubinRecord &c) {
         c.kernel_id = "fwd_sm80_bf16_hdqk32_hdv32_causal_nocap_bm64_bn64_w4_s2_mod0123456789abcdef_sm_80";
       },
       "it was compiled with a caller's modifiers (mod0123456789abcdef), whose source the "
       "database does not hold"},
      {"a GPU reference of a caller's modifiers",
       [](CubinRecord &c) { c.kernel_id = "reference_attention_sm_80_mod0123456789abcdef"; },
       "it was compiled with a caller's modifiers (mod0123456789abcdef), whose source the "
       "database does not hold"},
      {"a block-mask builder",
       [](CubinRecord &c) { c.kernel_id = "block_mask_build_sm_80_mod0123456789abcdef"; },
       "it was compiled with a caller's modifiers (mod0123456789abcdef), whose source the "
       "database does not hold"},
      {"a name flashjit never stores",
       [](CubinRecord &c) { c.kernel_id = "shellcode_sm_80"; },
       "kernel id 'shellcode_sm_80': too few fields for a kernel id"},
      {"another kernel's id under this key",
       [](CubinRecord &c) {
         c.kernel_id = "fwd_sm80_bf16_hdqk32_hdv32_causal_nocap_bm128_bn64_w4_s2_sm_80";
       },
       ""},  // the key check: see below
      {"an id of another arch",
       [](CubinRecord &c) { c.arch = "sm_86"; },
       "its kernel id names sm_80, its arch is sm_86"},
  };
  for (const Case &c : cases) {
    CubinRecord edited = row;
    c.edit(edited);
    r = reproduce_cubin(edited);
    EXPECT_EQ(r.outcome, Reproduction::unverifiable) << c.what;
    if (!c.detail.empty())
      EXPECT_EQ(r.detail, c.detail) << c.what;
    else
      EXPECT_EQ(llvm::StringRef(r.detail).startswith("this flashjit generates key "), true)
          << c.what << ": " << r.detail;
    EXPECT_TRUE(r.rebuilt.empty()) << c.what;
  }
}

}  // namespace
}  // namespace flashjit
