// A field of KernelConfig or Problem reaches every place it must: the field
// tables (flashjit/kernel_config_fields.h, flashjit/problem_fields.h) cover
// their structs, and each surface that is not derived from them names every
// field: the ctypes mirror and tests/python/abi_layout.c (in the C struct's
// order), the tuning database's columns and YAML keys, the CLI's flags,
// describe() and KernelSpec::id. The derived surfaces (the worker protocol,
// the stored config, the call key) are round-tripped with every field set,
// so that a derivation that skips a field fails here too.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstddef>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cache/tuning_fields.h"
#include "cli_runner.h"
#include "flashjit/enumerators.h"
#include "flashjit/kernel_config_fields.h"
#include "flashjit/problem_fields.h"
#include "generator/kernel_spec.h"
#include "runtime/call_key.h"
#include "runtime/tuning_key.h"
#include "tuner/worker_protocol.h"
#include "tuning_db_test_util.h"

namespace flashjit {
namespace {

// ---- the tables' own checks ---------------------------------------------------

// Converts to any member type, so that the number of them an aggregate takes
// in braces is its number of members.
struct AnyMember {
  template <typename T>
  operator T() const;  // declared only: used in unevaluated braces
};

template <typename Aggregate, typename... Members>
constexpr std::size_t member_count() {
  if constexpr (requires { Aggregate{Members{}..., AnyMember{}}; })
    return member_count<Aggregate, Members..., AnyMember>();
  else
    return sizeof...(Members);
}

template <typename Struct>
std::vector<std::string> table_names() {
  std::vector<std::string> names;
  auto add = [&](const auto &field) { names.push_back(field.name); };
  if constexpr (std::is_same_v<Struct, Problem>)
    for_each_problem_field(add);
  else
    for_each_kernel_config_field(add);
  return names;
}

std::vector<std::string> tuned_config_names() {
  std::vector<std::string> names;
  for_each_kernel_config_field([&](const auto &field) {
    if (field.tuned) names.push_back(field.name);
  });
  return names;
}

template <typename CStruct, typename CType>
std::size_t c_offset(CType CStruct::*member) {
  static const CStruct object{};
  return std::size_t(reinterpret_cast<const char *>(&(object.*member)) -
                     reinterpret_cast<const char *>(&object));
}

// The table's C fields in the C struct's order (by offset).
template <typename Struct>
std::vector<std::string> c_struct_order() {
  std::map<std::size_t, std::string> by_offset;
  auto add = [&](const auto &field) { by_offset[c_offset(field.c_member)] = field.name; };
  if constexpr (std::is_same_v<Struct, Problem>)
    for_each_problem_field(add);
  else
    for_each_kernel_config_field(add);
  std::vector<std::string> names;
  for (const auto &[offset, name] : by_offset) names.push_back(name);
  return names;
}

// A value other than `value` (a default), different per `salt` so that two
// fields swapped somewhere do not read back alike. Numbers grow past 1, so a
// split count splits.
template <typename T>
T other_value(T value, int salt) {
  if constexpr (std::is_same_v<T, bool>) {
    return !value;
  } else if constexpr (std::is_enum_v<T>) {
    const auto values = enumerators(T{});
    for (std::size_t i = 0; i < values.size(); ++i)
      if (values[i] == value) return values[(i + 1) % values.size()];
    return values[0];
  } else {
    return value + T(2 + salt);
  }
}

// Every field of KernelConfig other than its default (and a valid tuned
// config: a concrete path, positive tiles, splits in range).
KernelConfig every_config_field_set() {
  KernelConfig config;
  int salt = 0;
  for_each_kernel_config_field(
      [&](const auto &field) { config.*field.member = other_value(config.*field.member, salt++); });
  return config;
}

Problem every_problem_field_set() {
  Problem problem;
  int salt = 0;
  for_each_problem_field([&](const auto &field) {
    problem.*field.member = other_value(problem.*field.member, salt++);
  });
  return problem;
}

std::string source_file(const char *path) {
  return testing_cli::slurp(std::string(FLASHJIT_SOURCE_DIR) + "/" + path);
}

std::vector<std::string> matches(const std::string &text, const std::string &pattern) {
  std::vector<std::string> out;
  const std::regex re(pattern);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), re); it != std::sregex_iterator();
       ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(FieldTables, CoverTheirStructs) {
  EXPECT_EQ(member_count<KernelConfig>(), kKernelConfigFieldCount)
      << "a KernelConfig field is missing from flashjit/kernel_config_fields.h";
  EXPECT_EQ(member_count<Problem>(), kProblemFieldCount)
      << "a Problem field is missing from flashjit/problem_fields.h";
  EXPECT_EQ(member_count<StoredConfig>(), tuning_fields::config_fields().size())
      << "a StoredConfig field is missing from cache/tuning_fields.cpp's kConfigFields";
  for (const auto &names : {table_names<KernelConfig>(), table_names<Problem>()})
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
}

// flashjit_config's fields are only ever appended: the table's order.
TEST(FieldTables, ConfigFieldsAreInTheCStructsOrder) {
  EXPECT_EQ(c_struct_order<KernelConfig>(), table_names<KernelConfig>());
}

TEST(FieldTables, EveryFieldOfTheTestValuesIsSet) {
  const KernelConfig config = every_config_field_set();
  for_each_kernel_config_field([&](const auto &field) {
    EXPECT_FALSE(config.*field.member == KernelConfig{}.*field.member) << field.name;
  });
  const Problem problem = every_problem_field_set();
  for_each_problem_field([&](const auto &field) {
    EXPECT_FALSE(problem.*field.member == Problem{}.*field.member) << field.name;
  });
}

// ---- the hand-kept surfaces -----------------------------------------------------

// The body of `class <name>(ctypes.Structure):` up to the next class.
std::string python_class(const std::string &text, const std::string &name) {
  const std::size_t start = text.find("class " + name + "(ctypes.Structure):");
  if (start == std::string::npos) return "";
  return text.substr(start, text.find("\nclass ", start + 1) - start);
}

TEST(FieldTables, PythonMirrorHasEveryCFieldInOrder) {
  const std::string capi = source_file("python/flashjit/_capi.py");
  ASSERT_FALSE(capi.empty()) << "python/flashjit/_capi.py not found under " FLASHJIT_SOURCE_DIR;
  // Every quoted name in the class body: its _fields_, in order.
  EXPECT_EQ(matches(python_class(capi, "Config"), "\"(\\w+)\""), c_struct_order<KernelConfig>())
      << "python/flashjit/_capi.py's Config._fields_ differ from flashjit_config";
  EXPECT_EQ(matches(python_class(capi, "Problem"), "\"(\\w+)\""), c_struct_order<Problem>())
      << "python/flashjit/_capi.py's Problem._fields_ differ from flashjit_problem";
}

TEST(FieldTables, AbiLayoutPrintsEveryCFieldInOrder) {
  const std::string layout = source_file("tests/python/abi_layout.c");
  ASSERT_FALSE(layout.empty()) << "tests/python/abi_layout.c not found";
  EXPECT_EQ(matches(layout, "FIELD\\(flashjit_config, (\\w+)\\)"), c_struct_order<KernelConfig>());
  EXPECT_EQ(matches(layout, "FIELD\\(flashjit_problem, (\\w+)\\)"), c_struct_order<Problem>());
}

class FieldTablesDb : public ::testing::Test {
 protected:
  testing_db::TempDir dir_;
};

// StoredConfig keeps the tuned fields under KernelConfig's names, and the
// database has both configs' columns for each (a migration adds them).
TEST_F(FieldTablesDb, EveryTunedFieldHasItsColumns) {
  std::vector<std::string> stored;
  for (const tuning_fields::ConfigField &field : tuning_fields::config_fields())
    stored.push_back(field.name);
  EXPECT_EQ(stored, tuned_config_names());

  const std::string path = dir_.file("tuning.db");
  ASSERT_TRUE(testing_db::open_ok(path));
  sqlite3 *db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  std::set<std::string> columns;
  sqlite3_stmt *statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT name FROM pragma_table_info('tunings')", -1,
                               &statement, nullptr),
            SQLITE_OK);
  while (sqlite3_step(statement) == SQLITE_ROW)
    columns.insert(reinterpret_cast<const char *>(sqlite3_column_text(statement, 0)));
  sqlite3_finalize(statement);
  sqlite3_close(db);
  for (const std::string &name : tuned_config_names())
    for (const char *group : {"config_", "heuristic_config_"})
      EXPECT_TRUE(columns.count(group + name)) << "no column " << group << name;
}

// Export, YAML keys, import: both configs carry every tuned field.
TEST_F(FieldTablesDb, YamlCarriesEveryTunedField) {
  TuningRecord record = testing_db::full_record();
  record.config = record.heuristic_config = to_stored(every_config_field_set());
  auto db = testing_db::open_ok(dir_.file("a.db"));
  ASSERT_TRUE(db);
  ASSERT_FALSE(bool(db->put_tuning(record)));
  const std::string file = dir_.file("export.yaml");
  ASSERT_FALSE(bool(db->export_yaml(file)));

  const YAML::Node tuning = YAML::LoadFile(file)["tunings"][0];
  for (const std::string &name : tuned_config_names())
    for (const char *group : {"config", "heuristic_config"})
      EXPECT_TRUE(bool(tuning[group][name])) << group << "." << name << " is not exported";

  auto other = testing_db::open_ok(dir_.file("b.db"));
  ASSERT_TRUE(other);
  auto report = other->import_yaml(file);
  ASSERT_TRUE(bool(report)) << llvm::toString(report.takeError());
  EXPECT_TRUE(report->skipped.empty()) << report->skipped.front();
  auto found = other->find_tuning(record.device, record.software, record.problem);
  ASSERT_TRUE(found && *found) << (found ? "absent" : llvm::toString(found.takeError()));
  EXPECT_EQ((*found)->config, record.config);
  EXPECT_EQ((*found)->heuristic_config, record.heuristic_config);
}

// `flashjit run --help` (the command that takes both kinds of flags). A
// Problem field's flag is not its name, so it is listed here: a new field
// fails until it has one.
TEST(FieldTables, TheCliHasAFlagForEveryField) {
  const testing_cli::CliResult help = testing_cli::run_cli({"run", "--help"});
  ASSERT_EQ(help.code, 0) << help.err;
  auto has_flag = [&](const std::string &flag) {
    return help.out.find("  " + flag + "=") != std::string::npos ||
           help.out.find("  " + flag + " ") != std::string::npos;
  };
  for_each_kernel_config_field([&](const auto &field) {
    std::string flag = std::string("--") + field.name;
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_TRUE(has_flag(flag)) << "KernelConfig::" << field.name << " has no " << flag;
  });
  const std::map<std::string, std::string> problem_flags = {
      {"dtype", "--dtype"},       {"kv_dtype", "--kv-dtype"},    {"out_dtype", "--out-dtype"},
      {"batch", "--batch"},          {"heads_q", "--heads"},
      {"heads_kv", "--heads-kv"}, {"seqlen_q", "--seqlen-q"},    {"seqlen_k", "--seqlen-k"},
      {"head_dim_qk", "--hdim"},  {"head_dim_v", "--hdim-v"},    {"mask", "--mask"},
      {"window_left", "--mask"},  {"window_right", "--mask"},    {"softmax_scale", "--scale"},
      {"softcap", "--softcap"},   {"seqused_k", "--cache-seqlens"}, {"page_size", "--page-size"},
      {"varlen", "--varlen"},     {"attention_chunk", "--attention-chunk"}};
  for_each_problem_field([&](const auto &field) {
    auto flag = problem_flags.find(field.name);
    if (flag == problem_flags.end())
      ADD_FAILURE() << "Problem::" << field.name
                    << " has no CLI flag (cli/cli_common.cpp) listed in this test";
    else
      EXPECT_TRUE(has_flag(flag->second)) << "Problem::" << field.name << ": " << flag->second;
  });
}

// describe() names every config field, and the kernel ID (the key of the
// kernel and cubin caches) changes with each: they all change the compiled
// code. A field that does not would be left out here, saying why.
TEST(FieldTables, DescribeAndKernelIdChangeWithEveryConfigField) {
  Problem gqa;
  gqa.heads_q = 8;
  gqa.heads_kv = 2;  // so that packing packs
  const TargetArch arch{9, 0, true};
  const KernelConfig base;
  const KernelConfig set = every_config_field_set();
  for_each_kernel_config_field([&](const auto &field) {
    KernelConfig changed = base;
    changed.*field.member = set.*field.member;
    EXPECT_NE(describe(changed), describe(base)) << field.name;
    EXPECT_NE(kernel_spec_for(Pass::forward, gqa, changed, arch).id(),
              kernel_spec_for(Pass::forward, gqa, base, arch).id())
        << field.name;
  });
}

// A problem field that changes the compiled kernel (its KernelSpec ID) must
// change the call key too, or a call would run the plan of another kernel.
TEST(FieldTables, CallKeyHasEveryProblemFieldThatChangesTheKernel) {
  const TargetArch arch{9, 0, true};
  KernelConfig config{KernelPath::sm90, 64, 64, 8, 2};
  config.splits = 1;
  config.pack_gqa = GqaPacking::off;
  const Problem base;
  const Problem set = every_problem_field_set();
  int kernel_fields = 0;
  for_each_problem_field([&](const auto &field) {
    Problem changed = base;
    changed.*field.member = set.*field.member;
    if (kernel_spec_for(Pass::forward, changed, config, arch).id() ==
        kernel_spec_for(Pass::forward, base, config, arch).id())
      return;
    ++kernel_fields;
    EXPECT_FALSE(CallKey::make(1, changed, config) == CallKey::make(1, base, config))
        << field.name;
    EXPECT_NE(CallKeyHash{}(CallKey::make(1, changed, config)),
              CallKeyHash{}(CallKey::make(1, base, config)))
        << field.name;
  });
  EXPECT_GE(kernel_fields, 7);  // dtype, dims, mask, softcap, seqused_k, page_size, ...
}

// ---- the derived surfaces ---------------------------------------------------------

TEST(FieldTables, StoredConfigRoundTripsEveryTunedField) {
  KernelConfig expected = every_config_field_set();
  for_each_kernel_config_field([&](const auto &field) {
    if (!field.tuned) expected.*field.member = KernelConfig{}.*field.member;
  });
  auto back = from_stored(to_stored(every_config_field_set()));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, expected) << describe(*back);
}

TEST(FieldTables, WorkerProtocolRoundTripsEveryField) {
  KernelSpec spec;
  spec.config = every_config_field_set();
  const llvm::json::Object json = worker_protocol::spec_to_json(spec);
  for_each_kernel_config_field([&](const auto &field) {
    EXPECT_TRUE(json.getObject("config")->get(field.name)) << field.name;
  });
  auto back = worker_protocol::spec_from_json(json);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->config, spec.config) << describe(back->config);

  const Problem problem = every_problem_field_set();
  auto problem_back = worker_protocol::problem_from_json(worker_protocol::problem_to_json(problem));
  ASSERT_TRUE(bool(problem_back)) << llvm::toString(problem_back.takeError());
  for_each_problem_field([&](const auto &field) {
    EXPECT_TRUE((*problem_back).*field.member == problem.*field.member) << field.name;
  });
}

// A worker compiles and times the kernel of the spec it reads: every field
// that reaches the kernel's source must cross (an e4m3 spec once arrived
// with bf16 K/V, an fp16 one with bf16 elements, a chunked one unchunked).
TEST(FieldTables, WorkerProtocolRoundTripsEverySpecField) {
  KernelSpec fp16;
  fp16.pass = Pass::forward;
  fp16.dtype = fp16.out_dtype = fp16.kv_dtype = DType::fp16;
  fp16.head_dim_qk = 576;
  fp16.head_dim_v = 512;
  fp16.mask = MaskKind::causal;
  fp16.chunked = true;
  fp16.softcap = true;
  fp16.config = every_config_field_set();
  fp16.arch = TargetArch{9, 0, true};
  fp16.pack_gqa = 4;
  fp16.split_kv = true;
  fp16.seqused_k = true;
  fp16.page_size = 64;
  fp16.varlen = true;
  fp16.v_in_k = true;
  fp16.modifiers.mask_mod = "bool mask_mod(int b, int h, int q, int k) { return k <= q; }";
  KernelSpec e4m3 = fp16;
  e4m3.dtype = e4m3.kv_dtype = DType::e4m3;
  KernelSpec fp8_cache = fp16;
  fp8_cache.dtype = fp8_cache.out_dtype = DType::bf16;
  fp8_cache.kv_dtype = DType::e4m3;
  for (const KernelSpec &spec : {fp16, e4m3, fp8_cache}) {
    auto back = worker_protocol::spec_from_json(worker_protocol::spec_to_json(spec));
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, spec) << spec.id() << " came back as " << back->id();
    EXPECT_EQ(back->id(), spec.id());
  }
}

TEST(FieldTables, CallKeyHasEveryConfigField) {
  const Problem problem;
  const KernelConfig base;
  const KernelConfig set = every_config_field_set();
  const CallKey base_key = CallKey::make(1, problem, base);
  for_each_kernel_config_field([&](const auto &field) {
    KernelConfig changed = base;
    changed.*field.member = set.*field.member;
    const CallKey key = CallKey::make(1, problem, changed);
    EXPECT_FALSE(key == base_key) << field.name;
    EXPECT_NE(CallKeyHash{}(key), CallKeyHash{}(base_key)) << field.name;
  });
}

}  // namespace
}  // namespace flashjit
