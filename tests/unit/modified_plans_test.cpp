// A caller's modifiers in plans, the worker protocol and precompile,
// without a GPU: a plan's score_mod/mask_mod/aux keys read snippet
// files beside the plan, with exact errors; worker requests carry the
// snippets; `precompile --mask-mod` stores the modified kernels under the
// ids a call (and `query`) looks up; `tune` checks them and their values.
#include <gtest/gtest.h>

#include <string>

#include "cli_files.h"
#include "cli_runner.h"
#include "generator/heuristic.h"
#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "tuner/plan.h"
#include "tuner/worker_protocol.h"

namespace flashjit {
namespace {

using namespace testing_cli;

const char *kDocuments =
    "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
    "  return aux.doc_ids[q] == aux.doc_ids[k];\n"
    "}\n";
const char *kAlibi =
    "__device__ float score_mod(float s, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return s + aux.slopes[h] * (k - q);\n"
    "}\n";
const char *kAlibiGrad =
    "__device__ float score_mod_grad(float s, int b, int h, int q, int k, const Aux &aux) {\n"
    "  return 1.f;\n"
    "}\n";

std::string plan_error(const std::string &path) {
  auto plan = load_plan(path);
  if (plan) return "(parsed)";
  return llvm::toString(plan.takeError());
}

TEST(ModifiedPlans, PlanKeysReadTheSnippetsBesideThePlan) {
  TempDir dir;
  write_file(dir.file("docs.cu"), kDocuments);
  write_file(dir.file("alibi.cu"), kAlibi);
  write_file(dir.file("alibi_grad.cu"), kAlibiGrad);
  write_file(dir.file("plan.yaml"),
             "name: mods\n"
             "defaults: {heads: 16, hdim: 128, seqlen: 2048}\n"
             "problems:\n"
             "  - {mask_mod: docs.cu, aux: 'const int* doc_ids', mask_mod_qk_only: true}\n"
             "  - {score_mod: alibi.cu, score_mod_grad: alibi_grad.cu, "
             "aux: 'const float* slopes', passes: [fwd, bwd]}\n"
             "  - {seqlen: 512, sinks: true}\n"
             "  - {seqlen: 512}\n");
  auto plan = load_plan(dir.file("plan.yaml"));
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 5u);
  Modifiers docs;
  docs.mask_mod = kDocuments;
  docs.aux = {{"const int*", "doc_ids"}};
  docs.mask_mod_qk_only = MaskModQkOnly::on;
  EXPECT_EQ(plan->entries[0].modifiers, docs);
  EXPECT_EQ(plan->entries[0].name,
            describe(plan->entries[0].problem) + " mod=" + modifiers_hash(docs));
  Modifiers alibi;
  alibi.score_mod = kAlibi;
  alibi.score_mod_grad = kAlibiGrad;
  alibi.aux = {{"const float*", "slopes"}};
  EXPECT_EQ(plan->entries[1].modifiers, alibi);
  EXPECT_EQ(plan->entries[2].modifiers, alibi);
  EXPECT_EQ(plan->entries[2].pass, Pass::backward);
  EXPECT_EQ(plan->entries[2].name,
            describe(plan->entries[2].problem) + " mod=" + modifiers_hash(alibi) + " (bwd)");
  EXPECT_TRUE(plan->entries[3].modifiers.sinks);
  EXPECT_TRUE(plan->entries[4].modifiers.empty());
  EXPECT_EQ(plan->entries[4].name, describe(plan->entries[4].problem));
}

// A backward's derivative in the score_mod's own file: no score_mod_grad
// key needed (a probe compile finds it), and the entry keeps the file as it
// is; mask_mod_qk_only absent is left to the probe, false is explicit.
TEST(ModifiedPlans, TheBackwardFindsTheDerivativeInTheScoreModFile) {
  TempDir dir;
  write_file(dir.file("alibi.cu"), std::string(kAlibi) + kAlibiGrad);
  write_file(dir.file("docs.cu"), kDocuments);
  write_file(dir.file("plan.yaml"),
             "defaults: {heads: 16, hdim: 128, seqlen: 2048}\n"
             "problems:\n"
             "  - {score_mod: alibi.cu, aux: 'const float* slopes', passes: [fwd, bwd]}\n"
             "  - {mask_mod: docs.cu, aux: 'const int* doc_ids'}\n"
             "  - {mask_mod: docs.cu, aux: 'const int* doc_ids', mask_mod_qk_only: false}\n");
  auto plan = load_plan(dir.file("plan.yaml"));
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  ASSERT_EQ(plan->entries.size(), 4u);
  EXPECT_EQ(plan->entries[1].pass, Pass::backward);
  EXPECT_EQ(plan->entries[1].modifiers.score_mod, std::string(kAlibi) + kAlibiGrad);
  EXPECT_EQ(plan->entries[1].modifiers.score_mod_grad, "");
  EXPECT_EQ(plan->entries[2].modifiers.mask_mod_qk_only, MaskModQkOnly::automatic);
  EXPECT_EQ(plan->entries[3].modifiers.mask_mod_qk_only, MaskModQkOnly::off);
  // The worker request carries the three states (absent: automatic).
  for (const PlanEntry &entry : plan->entries) {
    auto back =
        worker_protocol::modifiers_from_json(worker_protocol::modifiers_to_json(entry.modifiers));
    ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
    EXPECT_EQ(*back, entry.modifiers);
  }
}

TEST(ModifiedPlans, PlanKeyErrorsNameFileLineAndKey) {
  TempDir dir;
  write_file(dir.file("alibi.cu"), kAlibi);
  write_file(dir.file("blank.cu"), " \n\t\n");
  write_file(dir.file("latin1.cu"), "// \xe9t\xe9\n");
  write_file(dir.file("alibi_grad.cu"), kAlibiGrad);
  write_file(dir.file("alibi_with_grad.cu"), std::string(kAlibi) + kAlibiGrad);
  const std::string head = "defaults: {heads: 16, hdim: 128, seqlen: 2048}\nproblems:\n";
  const std::pair<std::string, std::string> cases[] = {
      {"  - {mask_mod: nowhere.cu}\n",
       ":3: key 'mask_mod': cannot read " + dir.file("nowhere.cu") + ": No such file or directory"},
      {"  - {mask_mod: [a, b]}\n",
       ":3: key 'mask_mod': expected the path of a CUDA source file, got a list"},
      {"  - {score_mod: alibi.cu, aux: 'float'}\n",
       ":3: key 'aux': 'float' is not a declaration TYPE NAME (e.g. 'const float* slopes')"},
      {"  - {mask_mod: blank.cu}\n", ":3: key 'mask_mod': " + dir.file("blank.cu") + " is empty"},
      {"  - {mask_mod: latin1.cu}\n",
       ":3: key 'mask_mod': " + dir.file("latin1.cu") + " is not UTF-8 text (byte 3)"},
      {"  - {score_mod: alibi.cu, aux: 'const float* slopes', sinks: yes}\n",
       ":3: key 'sinks': expected true or false, got yes"},
      {"  - {score_mod: alibi.cu, aux: 'const float* slopes', pass: bwd}\n",
       ":3: pass bwd with a score_mod needs a score_mod_grad (d score_mod / d score), which the "
       "backward scales by: define float score_mod_grad(float score, int b, int h, int q, int "
       "k, const Aux &aux) in the score_mod's file, or give key score_mod_grad"},
      {"  - {score_mod: alibi_with_grad.cu, score_mod_grad: alibi_grad.cu, aux: 'const float* "
       "slopes', pass: bwd}\n",
       ":3: key score_mod_grad and the score_mod_grad that key score_mod's file defines: give "
       "one of them"},
      {"  - {aux: 'int n'}\n",
       ":3: modifiers: aux fields are declared but there is no score_mod or mask_mod"},
  };
  for (const auto &[problems, message] : cases) {
    write_file(dir.file("bad.yaml"), head + problems);
    EXPECT_EQ(plan_error(dir.file("bad.yaml")), dir.file("bad.yaml") + message) << problems;
  }
}

TEST(ModifiedPlans, WorkerRequestsCarryTheSnippets) {
  Problem p;
  p.heads_q = p.heads_kv = 8;
  p.seqlen_q = p.seqlen_k = 1024;
  const TargetArch arch{9, 0, true};
  auto spec = make_forward_spec(p, default_forward_config(p, arch), arch);
  ASSERT_TRUE(bool(spec)) << llvm::toString(spec.takeError());
  spec->modifiers.score_mod = kAlibi;
  spec->modifiers.score_mod_grad = kAlibiGrad;
  spec->modifiers.mask_mod = kDocuments;
  spec->modifiers.aux = {{"const float*", "slopes"}, {"const int*", "doc_ids"}};
  spec->modifiers.sinks = true;
  auto back = worker_protocol::spec_from_json(worker_protocol::spec_to_json(*spec));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->modifiers, spec->modifiers);
  EXPECT_EQ(back->id(), spec->id());
  // Without modifiers the request has no such member (as before them).
  KernelSpec plain = *spec;
  plain.modifiers = {};
  EXPECT_EQ(worker_protocol::spec_to_json(plain).get("modifiers"), nullptr);
  // A malformed one is refused by name.
  llvm::json::Object request = worker_protocol::spec_to_json(*spec);
  request.getObject("modifiers")->erase("aux");
  auto bad = worker_protocol::spec_from_json(request);
  ASSERT_FALSE(bool(bad));
  EXPECT_EQ(llvm::toString(bad.takeError()),
            "worker request: 'modifiers.aux': expected a list of [type, name]");
}

// hdim 256 on sm_86 keeps the candidates few (as CliTuning's precompile).
TEST(ModifiedPlans, PrecompileStoresTheModifiedKernelsAQueryFinds) {
  TempDir dir;
  write_file(dir.file("docs.cu"), kDocuments);
  const std::string db = dir.file("p.db");
  const std::vector<std::string> problem = {"--hdim", "256", "--seqlen", "1024", "--mask-mod",
                                            dir.file("docs.cu"), "--aux", "const int* doc_ids"};
  std::vector<std::string> args = {"precompile", "--arch", "sm_86", "--db", db, "--json"};
  args.insert(args.end(), problem.begin(), problem.end());
  CliResult r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object first = parse_json(r.out);
  const int64_t compiled = I(first.getInteger("compiled"));
  EXPECT_GE(compiled, 2);  // a candidate or more, and the reference with the snippet
  EXPECT_EQ(I(first.getInteger("failed")), 0);
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(I(parse_json(r.out).getInteger("compiled")), 0);

  // The probe finds that the documents' mask reads neither b nor h: the
  // kernels stored (and the one a call looks up) build one block map for
  // every batch and head, as under mask_mod_qk_only.
  Modifiers docs;
  docs.mask_mod = kDocuments;
  docs.aux = {{"const int*", "doc_ids"}};
  docs.mask_mod_qk_only = MaskModQkOnly::on;
  const std::string mod = "_mod" + modifiers_hash(docs);
  r = run_cli({"db", "list", "--json", "--db", db});
  ASSERT_EQ(r.code, 0) << r.err;
  llvm::json::Object list = parse_json(r.out);
  ASSERT_NE(list.getArray("cubins"), nullptr);
  EXPECT_EQ(int64_t(list.getArray("cubins")->size()), compiled);
  for (const llvm::json::Value &cubin : *list.getArray("cubins"))
    EXPECT_NE(S(cubin.getAsObject()->getString("kernel_id")).find(mod), std::string::npos)
        << S(cubin.getAsObject()->getString("kernel_id"));

  // The heuristic's modified kernel, which a call (and query) looks up, is
  // among them.
  args = {"query", "--arch", "sm_86", "--device-name", "Test GPU 9000", "--json", "--db", db};
  args.insert(args.end(), problem.begin(), problem.end());
  r = run_cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string kernel_id = S(parse_json(r.out).getString("kernel_id"));
  EXPECT_NE(kernel_id.find(mod), std::string::npos) << kernel_id;
  bool stored = false;
  for (const llvm::json::Value &cubin : *list.getArray("cubins"))
    stored |= S(cubin.getAsObject()->getString("kernel_id")) == kernel_id;
  EXPECT_TRUE(stored) << kernel_id;
}

// `tune` with modifiers checks them and their scalar values before it looks
// for a GPU (this machine has none: a complete request gets as far as
// "tune needs a GPU"); a plan names its values with aux_values.
TEST(ModifiedPlans, TuneChecksModifiersAndTheirValuesBeforeAnyGpuWork) {
  TempDir dir;
  write_file(dir.file("docs.cu"), kDocuments);
  write_file(dir.file("prefix.cu"),
             "__device__ bool mask_mod(int b, int h, int q, int k, const Aux &aux) {\n"
             "  return k < aux.prefix || k <= q;\n"
             "}\n");
  write_file(dir.file("alibi.cu"), kAlibi);
  const std::vector<std::string> problem = {"--hdim", "64", "--seqlen", "1024", "--db",
                                            dir.file("t.db")};
  auto tune = [&](std::vector<std::string> flags) {
    std::vector<std::string> args = {"tune"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), problem.begin(), problem.end());
    return run_cli(args);
  };
  const std::string prefix = dir.file("prefix.cu");
  const std::pair<std::vector<std::string>, std::string> usage_errors[] = {
      {{"--mask-mod", prefix, "--aux", "int prefix"},
       "the aux field 'prefix' (int) needs a value: give --aux-value prefix=VALUE"},
      {{"--mask-mod", prefix, "--aux", "int prefix", "--aux-value", "prefix=x"},
       "--aux-value prefix=x: 'prefix' is int: expected an integer"},
      {{"--mask-mod", prefix, "--aux", "int prefix", "--aux-value", "prefix=1", "--aux-value",
        "prefix=2"},
       "--aux-value: 'prefix' is given twice"},
      {{"--aux-value", "prefix=1"}, "--aux-value: given without --aux fields to set"},
      {{"--mask-mod", dir.file("docs.cu"), "--aux", "const int* doc_ids", "--aux-value",
        "doc_ids=1"},
       "--aux-value doc_ids=1: 'doc_ids' is a pointer (const int*): flashjit generates its "
       "values"},
      {{"--mask-mod", prefix, "--aux", "int prefix", "--aux-value", "prefix=64", "--varlen"},
       "tuning a packed batch (varlen) with modifiers is not supported: the tuner checks a "
       "packed batch's winner without them. Tune the dense problem of the same head dims and "
       "mask, or give the call a config"},
      {{"--score-mod", dir.file("alibi.cu"), "--aux", "const float* slopes", "--pass", "bwd"},
       "--pass bwd with --score-mod needs a score_mod_grad (d score_mod / d score), which the "
       "backward scales by: define float score_mod_grad(float score, int b, int h, int q, int "
       "k, const Aux &aux) in " +
           dir.file("alibi.cu") + ", or give --score-mod-grad FILE"},
  };
  for (const auto &[flags, message] : usage_errors) {
    const CliResult r = tune(flags);
    EXPECT_EQ(r.code, 2) << message;
    EXPECT_EQ(r.err, "flashjit: error: " + message + "\n");
  }
  // Complete: checked, then the GPU is looked for.
  CliResult r = tune({"--mask-mod", prefix, "--aux", "int prefix", "--aux-value", "prefix=64"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("tune needs a GPU"), std::string::npos) << r.err;

  // A plan's aux_values: only scalar fields it declares; a tune of an
  // entry without its values names the entry and the key.
  const std::pair<std::string, std::string> plan_errors[] = {
      {"  - {mask_mod: prefix.cu, aux: 'int prefix', aux_values: {window: 3}}\n",
       ":3: key 'aux_values': no aux field 'window' (key 'aux' declares the fields)"},
      {"  - {mask_mod: docs.cu, aux: 'const int* doc_ids', aux_values: {doc_ids: 3}}\n",
       ":3: key 'aux_values': 'doc_ids' is a pointer (const int*): flashjit generates its "
       "values"},
      {"  - {mask_mod: prefix.cu, aux: 'int prefix', aux_values: [3]}\n",
       ":3: key 'aux_values': expected a mapping of scalar aux fields to values, e.g. {prefix: "
       "1024}, got a list"},
  };
  for (const auto &[entry, message] : plan_errors) {
    write_file(dir.file("bad.yaml"),
               "defaults: {heads: 8, hdim: 64, seqlen: 256}\nproblems:\n" + entry);
    EXPECT_EQ(plan_error(dir.file("bad.yaml")), dir.file("bad.yaml") + message);
  }
  write_file(dir.file("plan.yaml"),
             "defaults: {heads: 8, hdim: 64, seqlen: 256, mask_mod: prefix.cu, aux: 'int "
             "prefix'}\n"
             "problems:\n"
             "  - {name: given, aux_values: {prefix: 32}}\n"
             "  - {name: missing}\n");
  auto plan = load_plan(dir.file("plan.yaml"));
  ASSERT_TRUE(bool(plan)) << llvm::toString(plan.takeError());
  EXPECT_EQ(plan->entries[0].aux_values, std::vector<std::string>{"prefix=32"});
  EXPECT_TRUE(plan->entries[1].aux_values.empty());
  r = run_cli({"tune", "--plan", dir.file("plan.yaml"), "--db", dir.file("t.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: missing: the aux field 'prefix' (int) needs a value: give "
                   "aux_values prefix=VALUE\n");
  r = run_cli({"tune", "--plan", dir.file("plan.yaml"), "--aux-value", "prefix=3", "--db",
               dir.file("t.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --plan: the plan gives each problem's aux values (key "
                   "aux_values); drop --aux-value\n");
}

TEST(ModifiedPlans, APlanTakesNoModifierFlags) {
  TempDir dir;
  write_file(dir.file("docs.cu"), kDocuments);
  CliResult r;
  write_file(dir.file("plan.yaml"), "problems:\n  - {heads: 8, hdim: 64, seqlen: 256}\n");
  r = run_cli({"precompile", "--arch", "sm_90a", "--plan", dir.file("plan.yaml"), "--mask-mod",
               dir.file("docs.cu"), "--aux", "const int* doc_ids", "--db", dir.file("p.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err,
            "flashjit: error: --plan: the plan gives each problem's modifiers (keys score_mod, "
            "score_mod_grad, mask_mod, aux, aux_values, mask_mod_qk_only, sinks); drop the modifier flags\n");
  // A snippet the compile workers could not receive unchanged.
  write_file(dir.file("latin1.cu"), "// \xe9t\xe9\n");
  r = run_cli({"precompile", "--arch", "sm_90a", "--mask-mod", dir.file("latin1.cu"), "--db",
               dir.file("p.db")});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "flashjit: error: --mask-mod " + dir.file("latin1.cu") +
                       ": not UTF-8 text (byte 3): save the file as UTF-8\n");
}

}  // namespace
}  // namespace flashjit
