#include "cli/db_common.h"

#include <cstdlib>
#include <variant>

#include "cache/tuning_fields.h"
#include "cli/problem_flags.h"
#include "generator/modifier_source.h"
#include "runtime/tuning_key.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::cli {

namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

}  // namespace

std::string first_line(llvm::Error e) {
  return llvm::StringRef(llvm::toString(std::move(e))).split('\n').first.str();
}

llvm::Expected<std::string> database_path(llvm::StringRef db_flag) {
  if (!db_flag.empty()) return db_flag.str();
  // The library reads FLASHJIT_DB=off as "no database"; a command that
  // exists to fill or read one needs an explicit file then.
  if (const char *env = std::getenv("FLASHJIT_DB")) {
    llvm::StringRef setting = llvm::StringRef(env).trim();
    if (setting.equals_insensitive("off") || setting.equals_insensitive("none"))
      return error(llvm::formatv("--db: needed, the database is disabled (FLASHJIT_DB={0})",
                                 setting));
  }
  return TuningDb::default_path();
}

llvm::Expected<std::unique_ptr<TuningDb>> open_database(llvm::StringRef path) {
  auto db = TuningDb::open(path);
  if (!db) return error(llvm::formatv("database {0}: {1}", path, first_line(db.takeError())));
  return db;
}

std::unique_ptr<TuningDb> open_existing_database(llvm::StringRef path, std::string &note) {
  if (!llvm::sys::fs::exists(path)) {
    note = llvm::formatv("no database at {0} yet", path).str();
    return nullptr;
  }
  auto db = open_database(path);
  if (!db) {
    note = first_line(db.takeError());
    return nullptr;
  }
  return std::move(*db);
}

llvm::Expected<TuningPlan> plan_or_problem(const ProblemOptions &problem, llvm::StringRef plan_file,
                                           int &exit_code, const ModifierOptions *modifiers) {
  exit_code = kExitUsage;
  if (!plan_file.empty()) {
    if (std::string given = problem.first_given(); !given.empty())
      return error(llvm::formatv("--plan: the plan gives the problems; drop {0}", given));
    if (modifiers && modifiers->given())
      return error("--plan: the plan gives each problem's modifiers (keys score_mod, "
                   "score_mod_grad, mask_mod, aux, aux_values, mask_mod_qk_only, sinks); drop the "
                   "modifier flags");
    return load_plan(plan_file);
  }
  auto parsed = parse_problem_flags(problem.values());
  if (!parsed) return parsed.takeError();
  Modifiers flagged;
  if (modifiers) {
    auto read = modifiers->read(parsed->pass);
    if (!read) return read.takeError();
    flagged = std::move(*read);
  }
  TuningPlan plan;
  plan.name = "command line";
  const bool deterministic = parsed->config.deterministic;
  plan.entries.push_back(PlanEntry{
      describe(parsed->problem) +
          (flagged.empty() ? std::string() : " mod=" + modifiers_hash(flagged)) +
          pass_suffix(parsed->pass, deterministic),
      parsed->problem, 0, parsed->pass, deterministic, parsed->seqlens_q, parsed->seqlens_k,
      parsed->total_q, parsed->total_k, std::move(flagged), {}});
  exit_code = kExitOk;
  return plan;
}

llvm::json::Object stored_config_json(const StoredConfig &c) {
  llvm::json::Object o;
  for (const tuning_fields::ConfigField &field : tuning_fields::config_fields())
    std::visit([&](auto *value) { o[field.name] = *value; }, tuning_fields::ref(field, c));
  return o;
}

std::string driver_text(int version) {
  return llvm::formatv("{0}.{1}", version / 1000, version % 1000 / 10).str();
}

std::string device_text(const DeviceFingerprint &d) {
  return llvm::formatv("{0} (cc {1}.{2}, {3} SMs, driver {4})", d.name, d.cc_major, d.cc_minor,
                       d.sm_count, driver_text(d.driver_version))
      .str();
}

llvm::json::Object device_json(const DeviceFingerprint &d) {
  return llvm::json::Object{
      {"name", d.name},
      {"compute_capability", llvm::formatv("{0}.{1}", d.cc_major, d.cc_minor).str()},
      {"sms", d.sm_count},
      {"driver_version", driver_text(d.driver_version)}};
}

std::string class_text(const ProblemClassKey &k) {
  std::string mask = k.mask;
  // A window's bounds after its name, before a chunk ("window+chunk8192").
  if (llvm::StringRef(k.mask).startswith("window"))
    mask = llvm::formatv("window({0},{1}){2}", k.window_left, k.window_right,
                         llvm::StringRef(k.mask).drop_front(6))
               .str();
  // The KV layout only where it is not the dense default.
  const std::string kv = k.kv_layout == "contiguous" ? "" : " " + k.kv_layout;
  // A caller's modifiers by their hash, where there are any.
  const std::string mods = k.modifiers.empty() ? "" : " mod=" + k.modifiers;
  // The element types beyond Q's where they are not the defaults.
  std::string dtype = k.dtype;
  if (k.kv_dtype != "same") dtype += " kv=" + k.kv_dtype;
  if (k.out_dtype != "auto") dtype += " out=" + k.out_dtype;
  return llvm::formatv("{0} {1} d={2}/{3} {4}{5}{10}{11} gqa={6} sq<=2^{7} sk<=2^{8} bh<=2^{9}",
                       k.pass, dtype, k.head_dim_qk, k.head_dim_v, mask,
                       k.softcap ? " softcap" : "", k.gqa_ratio, k.seqlen_q_bucket,
                       k.seqlen_k_bucket, k.batch_heads_bucket, kv, mods)
      .str();
}

llvm::json::Object class_json(const ProblemClassKey &k) {
  llvm::json::Object o{{"pass", k.pass},
                       {"dtype", k.dtype},
                       {"kv_dtype", k.kv_dtype},
                       {"out_dtype", k.out_dtype},
                       {"head_dim_qk", k.head_dim_qk},
                       {"head_dim_v", k.head_dim_v},
                       {"mask", k.mask},
                       {"softcap", k.softcap},
                       {"gqa_ratio", k.gqa_ratio},
                       {"kv_layout", k.kv_layout},
                       {"modifiers", k.modifiers},
                       {"seqlen_q_bucket", k.seqlen_q_bucket},
                       {"seqlen_k_bucket", k.seqlen_k_bucket},
                       {"batch_heads_bucket", k.batch_heads_bucket}};
  if (k.mask == "window") {
    o["window_left"] = k.window_left;
    o["window_right"] = k.window_right;
  }
  return o;
}

std::string packed_class_text(const Problem &p, int64_t total_q, const ProblemClassKey &key) {
  if (!p.varlen) return "";
  const std::string buckets =
      llvm::formatv("buckets seqlen_q {0}, seqlen_k {1}, batch x heads {2}", key.seqlen_q_bucket,
                    key.seqlen_k_bucket, key.batch_heads_bucket)
          .str();
  if (total_q == 0)
    return llvm::formatv("packed, {0} sequences of up to {1} queries / {2} keys, total unknown "
                         "(--seqlens-q gives it), sized as {0} x {1}: {3}",
                         p.batch, p.seqlen_q, p.seqlen_k, buckets)
        .str();
  return llvm::formatv("packed, {0} sequences, longest {1} queries / {2} keys, {3} queries in "
                       "all: sized as ceil({3} / {1}) = {4} x {1}: {5}",
                       p.batch, p.seqlen_q, p.seqlen_k, total_q, class_view(p, total_q).batch,
                       buckets)
      .str();
}

}  // namespace flashjit::cli
