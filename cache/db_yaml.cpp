// TuningDb::export_yaml / import_yaml. yaml-cpp reports errors by throwing;
// the exceptions are caught at the boundary of each function and become
// llvm::Errors (or skipped-entry lines) like everything else here.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <tuple>

#include "cache/base64.h"
#include "cache/export_origin.h"
#include "cache/tuning_db.h"
#include "cache/tuning_db_impl.h"
#include "cache/tuning_fields.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit {

namespace {

// Version of the export document's layout (not of the database schema).
constexpr int kExportFormat = 1;
// The most splits of a key range a config asks for (flashjit_config.splits).
constexpr int kMaxSplits = 256;

using tuning_fields::Field;
using tuning_fields::FieldRef;

llvm::Error yaml_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// ---- writing ----------------------------------------------------------------

void emit(YAML::Emitter &out, FieldRef ref) {
  std::visit(
      [&](auto *value) {
        using T = std::remove_pointer_t<decltype(value)>;
        // Quoted, so that a name like "yes", "~" or "" reads back as the
        // same string rather than a bool or null.
        if constexpr (std::is_same_v<T, std::string>)
          out << YAML::DoubleQuoted << *value;
        else
          out << *value;
      },
      ref);
}

void emit_tuning(YAML::Emitter &out, const TuningRecord &record) {
  out << YAML::BeginMap;
  llvm::StringRef open_group;  // the nested mapping being written, if any
  for (const Field &field : tuning_fields::fields()) {
    if (open_group != field.group) {
      if (!open_group.empty()) out << YAML::EndMap;
      open_group = field.group;
      if (!open_group.empty()) out << YAML::Key << field.group << YAML::Value << YAML::BeginMap;
    }
    out << YAML::Key << field.name << YAML::Value;
    emit(out, tuning_fields::ref(field, record));
  }
  if (!open_group.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
}

void emit_cubin(YAML::Emitter &out, const CubinRecord &record) {
  out << YAML::BeginMap;
  out << YAML::Key << "key" << YAML::Value << YAML::DoubleQuoted << record.key;
  out << YAML::Key << "kernel_id" << YAML::Value << YAML::DoubleQuoted << record.kernel_id;
  out << YAML::Key << "arch" << YAML::Value << YAML::DoubleQuoted << record.arch;
  out << YAML::Key << "nvrtc_version" << YAML::Value << YAML::DoubleQuoted << record.nvrtc_version;
  out << YAML::Key << "compile_ms" << YAML::Value << record.compile_ms;
  out << YAML::Key << "created_at" << YAML::Value << record.created_at;
  out << YAML::Key << "last_used_at" << YAML::Value << record.last_used_at;
  out << YAML::Key << "blob_sha256" << YAML::Value << YAML::DoubleQuoted << record.blob_sha256;
  out << YAML::Key << "blob" << YAML::Value << base64_encode(record.bytes);
  out << YAML::EndMap;
}

void emit_origin(YAML::Emitter &out, const ExportOrigin &origin) {
  out << YAML::Key << "origin" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "host" << YAML::Value << YAML::DoubleQuoted << origin.host;
  out << YAML::Key << "user" << YAML::Value << YAML::DoubleQuoted << origin.user;
  out << YAML::Key << "database" << YAML::Value << YAML::DoubleQuoted << origin.database;
  out << YAML::Key << "exported_at" << YAML::Value << YAML::DoubleQuoted << origin.exported_at;
  if (!origin.signature.empty())
    out << YAML::Key << "signature" << YAML::Value << YAML::DoubleQuoted << origin.signature;
  out << YAML::EndMap;
}

// ---- reading ----------------------------------------------------------------
// Each returns an empty string when `node` holds the type, else why not.

std::string decode(const YAML::Node &node, std::string &out) {
  if (!node.IsScalar()) return "is not a string";
  out = node.Scalar();
  return {};
}

template <typename Int>
std::string decode_integer(const YAML::Node &node, Int &out) {
  // Strictly decimal: yaml-cpp's own conversion also reads 010 as octal.
  if (!node.IsScalar() || llvm::StringRef(node.Scalar()).getAsInteger(10, out))
    return "'" + (node.IsScalar() ? node.Scalar() : std::string("(not a scalar)")) +
           "' is not an integer";
  return {};
}
std::string decode(const YAML::Node &node, int &out) { return decode_integer(node, out); }
std::string decode(const YAML::Node &node, int64_t &out) { return decode_integer(node, out); }

std::string decode(const YAML::Node &node, double &out) {
  if (!YAML::convert<double>::decode(node, out))
    return "'" + (node.IsScalar() ? node.Scalar() : std::string("(not a scalar)")) +
           "' is not a number";
  return {};
}

std::string decode(const YAML::Node &node, bool &out) {
  if (!YAML::convert<bool>::decode(node, out))
    return "'" + (node.IsScalar() ? node.Scalar() : std::string("(not a scalar)")) +
           "' is not true or false";
  return {};
}

// One entry of `tunings` or `cubins`: reads fields, and on the first bad one
// records a skip line naming the entry, the key and why.
class EntryReader {
 public:
  EntryReader(const char *list, size_t index, const YAML::Node &entry,
              std::vector<std::string> &skipped)
      : list_(list), index_(index), entry_(entry), skipped_(skipped) {}

  bool ok() const { return ok_; }

  bool skip(const std::string &what, const std::string &why) {
    if (ok_)
      skipped_.push_back(llvm::formatv("{0}[{1}] (line {2}): skipped: {3}: {4}", list_, index_,
                                       entry_.Mark().line + 1, what, why));
    ok_ = false;
    return false;
  }

  // `group` may be empty (a top-level key). Absent and not required: the
  // value keeps its default.
  template <typename T>
  bool read(llvm::StringRef group, llvm::StringRef name, bool required, bool non_empty, T &out) {
    if (!ok_) return false;
    std::string display = group.empty() ? name.str() : (group + "." + name).str();
    // Lookups through const nodes: a non-const operator[] may add the key.
    const YAML::Node parent = group.empty() ? entry_ : entry_[group.str()];
    if (!group.empty()) {
      if (!parent) return required ? skip(display, "missing") : true;
      if (!parent.IsMap()) return skip(group.str(), "is not a mapping");
    }
    const YAML::Node node = parent[name.str()];
    if (!node) return required ? skip(display, "missing") : true;
    if (node.IsNull()) return skip(display, "has no value");
    std::string why = decode(node, out);
    if (!why.empty()) return skip(display, why);
    if constexpr (std::is_same_v<T, std::string>)
      if (non_empty && out.empty()) return skip(display, "is empty");
    return true;
  }

 private:
  const char *list_;
  size_t index_;
  const YAML::Node &entry_;
  std::vector<std::string> &skipped_;
  bool ok_ = true;
};

std::optional<TuningRecord> read_tuning(size_t index, const YAML::Node &entry,
                                        std::vector<std::string> &skipped) {
  EntryReader reader("tunings", index, entry, skipped);
  if (!entry.IsMap()) {
    reader.skip("entry", "is not a mapping");
    return std::nullopt;
  }
  TuningRecord record;
  for (const Field &field : tuning_fields::fields())
    std::visit(
        [&](auto *value) {
          reader.read(field.group, field.name, field.required, field.non_empty, *value);
        },
        field.ref(record));
  if (!reader.ok()) return std::nullopt;
  // Well-typed is not enough: a value flashjit never writes (a pass, dtype,
  // mask or path it does not know, a tile size <= 0) is refused rather than
  // stored as a row that can only mislead.
  auto one_of = [&](const char *what, const std::string &value, const char *a, const char *b,
                    const char *c = nullptr) {
    if (value == a || value == b || (c && value == c)) return true;
    return reader.skip(what, llvm::formatv("'{0}' is not {1}{2} or {3}", value, a,
                                           c ? llvm::formatv(", {0}", b).str() : "",
                                           c ? c : b));
  };
  // "none", "causal" or "window", then "+chunk<N>" (N > 0, spelled as
  // flashjit spells it) under chunked attention.
  auto class_mask = [&](const char *what, const std::string &value) {
    llvm::StringRef base(value), chunk;
    std::tie(base, chunk) = base.split("+chunk");
    int n = 0;
    const bool chunk_ok = value.find("+chunk") == std::string::npos ||
                          (!chunk.getAsInteger(10, n) && n > 0 && std::to_string(n) == chunk);
    if ((base == "none" || base == "causal" || base == "window") && chunk_ok) return true;
    return reader.skip(what, llvm::formatv("'{0}' is not none, causal or window, optionally "
                                           "followed by +chunk<N> (N > 0)",
                                           value));
  };
  auto head_dim = [&](const char *what, int d) {
    return (d >= 8 && d <= 256 && d % 8 == 0) ||
           reader.skip(what, llvm::formatv("{0} is not a multiple of 8 in [8, 256]", d));
  };
  auto positive = [&](const char *what, int n) {
    return n > 0 || reader.skip(what, llvm::formatv("{0} is not a positive integer", n));
  };
  // "contiguous", "packed" (a varlen batch), "paged<N>" with N a page size
  // a problem can have, or "packed-paged<N>" (a varlen batch over such a cache).
  auto kv_layout = [&](const char *what, const std::string &value) {
    llvm::StringRef text(value);
    int page = 0;
    auto is_pages = [&](llvm::StringRef pages) {
      const std::string spelled = pages.str();
      return pages.consume_front("paged") && !pages.getAsInteger(10, page) && page >= 1 &&
             page <= 512 && "paged" + std::to_string(page) == spelled;
    };
    if (text == "contiguous" || text == "packed" || is_pages(text) ||
        (text.consume_front("packed-") && is_pages(text)))
      return true;
    return reader.skip(what, llvm::formatv("'{0}' is not contiguous, packed, paged<N> or "
                                           "packed-paged<N> (N in [1, 512])",
                                           value));
  };
  // "" (none) or a modifiers hash: 16 lowercase hex digits.
  auto modifiers = [&](const char *what, const std::string &value) {
    const bool hash = value.size() == 16 && llvm::all_of(value, [](char c) {
                        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
                      });
    return value.empty() || hash ||
           reader.skip(what, llvm::formatv("'{0}' is not empty (no modifiers) or a modifiers "
                                           "hash of 16 lowercase hex digits",
                                           value));
  };
  auto splits = [&](const char *what, int n) {
    return (n >= 0 && n <= kMaxSplits) ||
           reader.skip(what, llvm::formatv("{0} is not in [0, {1}]", n, kMaxSplits));
  };
  const bool valid = one_of("problem.pass", record.problem.pass, "fwd", "bwd", "bwd-det") &&
                     one_of("problem.dtype", record.problem.dtype, "bf16", "fp16", "e4m3") &&
                     head_dim("problem.head_dim_qk", record.problem.head_dim_qk) &&
                     head_dim("problem.head_dim_v", record.problem.head_dim_v) &&
                     class_mask("problem.mask", record.problem.mask) &&
                     positive("problem.gqa_ratio", record.problem.gqa_ratio) &&
                     kv_layout("problem.kv_layout", record.problem.kv_layout) &&
                     modifiers("problem.modifiers", record.problem.modifiers) &&
                     one_of("problem.kv_dtype", record.problem.kv_dtype, "same", "e4m3") &&
                     one_of("problem.out_dtype", record.problem.out_dtype, "auto", "bf16",
                            "fp16") &&
                     one_of("config.path", record.config.path, "sm80", "sm90") &&
                     positive("config.block_m", record.config.block_m) &&
                     positive("config.block_n", record.config.block_n) &&
                     positive("config.warps", record.config.warps) &&
                     positive("config.stages", record.config.stages) &&
                     splits("config.splits", record.config.splits) &&
                     one_of("config.pack_gqa", record.config.pack_gqa, "auto", "on", "off");
  if (!valid) return std::nullopt;
  return record;
}

std::optional<CubinRecord> read_cubin(size_t index, const YAML::Node &entry,
                                      std::vector<std::string> &skipped) {
  EntryReader reader("cubins", index, entry, skipped);
  if (!entry.IsMap()) {
    reader.skip("entry", "is not a mapping");
    return std::nullopt;
  }
  CubinRecord record;
  std::string blob;
  reader.read("", "key", true, true, record.key);
  reader.read("", "kernel_id", true, false, record.kernel_id);
  reader.read("", "arch", true, true, record.arch);
  reader.read("", "nvrtc_version", true, true, record.nvrtc_version);
  reader.read("", "compile_ms", false, false, record.compile_ms);
  reader.read("", "created_at", false, false, record.created_at);
  reader.read("", "last_used_at", false, false, record.last_used_at);
  reader.read("", "blob_sha256", true, true, record.blob_sha256);
  reader.read("", "blob", true, false, blob);
  if (!reader.ok()) return std::nullopt;

  llvm::Expected<std::vector<char>> bytes = base64_decode(blob);
  if (!bytes) {
    reader.skip("blob", llvm::toString(bytes.takeError()));
    return std::nullopt;
  }
  record.bytes = std::move(*bytes);
  std::string actual = cache_detail::sha256_hex(record.bytes);
  if (!llvm::StringRef(record.blob_sha256).equals_insensitive(actual)) {
    reader.skip("blob", llvm::formatv("hashes to {0}, not blob_sha256 {1} (corrupted or edited)",
                                      actual, record.blob_sha256));
    return std::nullopt;
  }
  record.blob_sha256 = actual;
  return record;
}

struct ParsedExport {
  std::vector<TuningRecord> tunings;
  std::vector<CubinRecord> cubins;
  // Where each of `cubins` stands in the file: "cubins[i] (line L)".
  std::vector<std::string> cubin_places;
  size_t cubin_entries = 0;
  std::optional<ExportOrigin> origin;  // absent: the file names none
  std::string origin_problem;          // why `origin` could not be read
};

// The `origin` mapping, when it is one of strings; why not otherwise. An
// export without one (older flashjit, hand-written) is simply foreign.
void read_origin(const YAML::Node &node, ParsedExport &parsed) {
  if (!node) return;
  if (!node.IsMap()) {
    parsed.origin_problem = "its origin is not a mapping";
    return;
  }
  ExportOrigin origin;
  const std::pair<const char *, std::string *> fields[] = {
      {"host", &origin.host},
      {"user", &origin.user},
      {"database", &origin.database},
      {"exported_at", &origin.exported_at},
      {"signature", &origin.signature}};
  for (const auto &[name, value] : fields) {
    const YAML::Node field = node[name];
    if (!field) continue;
    if (!field.IsScalar()) {
      parsed.origin_problem = llvm::formatv("its origin's {0} is not a string", name).str();
      return;
    }
    *value = field.Scalar();
  }
  parsed.origin = std::move(origin);
}

llvm::Expected<ParsedExport> parse_export(llvm::StringRef file, llvm::StringRef text,
                                          bool accept_cubins, ImportReport &report) {
  const YAML::Node root = YAML::Load(text.str());  // throws on malformed YAML
  auto at = [&](const YAML::Node &node) {
    return llvm::formatv("{0}:{1}", file, node.Mark().line + 1).str();
  };
  if (!root.IsMap() || !root["flashjit_db_export"])
    return yaml_error(file + ": not a flashjit database export (no `flashjit_db_export` key at "
                             "the top level)");
  int format = 0;
  if (!decode(root["flashjit_db_export"], format).empty() || format != kExportFormat)
    return yaml_error(llvm::formatv("{0}: flashjit_db_export: format '{1}' is not supported "
                                    "(this flashjit reads format {2})",
                                    at(root["flashjit_db_export"]),
                                    root["flashjit_db_export"].IsScalar()
                                        ? root["flashjit_db_export"].Scalar()
                                        : std::string("?"),
                                    kExportFormat));
  int schema = 0;
  if (!root["schema_version"] || !decode(root["schema_version"], schema).empty())
    return yaml_error(file + ": schema_version is missing or not an integer");
  if (schema > TuningDb::kSchemaVersion)
    return yaml_error(llvm::formatv("{0}: schema_version: {1} is newer than this flashjit's {2} "
                                    "(exported by a newer flashjit)",
                                    at(root["schema_version"]), schema, TuningDb::kSchemaVersion));

  ParsedExport parsed;
  read_origin(root["origin"], parsed);
  for (const char *list : {"tunings", "cubins"}) {
    const YAML::Node entries = root[list];
    if (!entries || entries.IsNull()) continue;
    if (!entries.IsSequence())
      return yaml_error(llvm::formatv("{0}: {1}: is not a list", at(entries), list));
    bool cubins = llvm::StringRef(list) == "cubins";
    if (cubins && !accept_cubins) {
      if (entries.size())
        report.skipped.push_back(llvm::formatv(
            "cubins: {0} {1} skipped: cubins are code: pass --accept-cubins to import them",
            entries.size(), entries.size() == 1 ? "entry" : "entries"));
      continue;
    }
    if (cubins) parsed.cubin_entries = entries.size();
    for (size_t i = 0; i < entries.size(); ++i) {
      if (cubins) {
        if (auto record = read_cubin(i, entries[i], report.skipped)) {
          parsed.cubins.push_back(std::move(*record));
          parsed.cubin_places.push_back(
              llvm::formatv("cubins[{0}] (line {1})", i, entries[i].Mark().line + 1).str());
        }
      } else if (auto record = read_tuning(i, entries[i], report.skipped)) {
        parsed.tunings.push_back(std::move(*record));
      }
    }
  }
  return parsed;
}

llvm::Error from_yaml_exception(llvm::StringRef file, const YAML::Exception &e) {
  if (e.mark.is_null()) return yaml_error(file + ": " + e.msg);
  return yaml_error(
      llvm::formatv("{0}:{1}:{2}: {3}", file, e.mark.line + 1, e.mark.column + 1, e.msg));
}

llvm::Expected<ParsedExport> parse_export_caught(llvm::StringRef file, llvm::StringRef text,
                                                 bool accept_cubins, ImportReport &report) {
  try {
    return parse_export(file, text, accept_cubins, report);
  } catch (const YAML::Exception &e) {
    return from_yaml_exception(file, e);
  }
}

// Whether the export is this user's own, unchanged: its signature checks
// under this user's origin key over the cubins as read. Says where it came
// from either way.
void judge_origin(const ParsedExport &parsed, ImportReport &report) {
  if (!parsed.origin) {
    report.origin = parsed.origin_problem.empty()
                        ? "unknown (the export names no origin)"
                        : "unknown (" + parsed.origin_problem + ")";
    return;
  }
  const ExportOrigin &o = *parsed.origin;
  const std::string where =
      llvm::formatv("{0}@{1}:{2}, exported {3}", o.user, o.host, o.database, o.exported_at).str();
  if (o.signature.empty()) {
    report.origin = where + " (unsigned)";
    return;
  }
  auto key = load_origin_key(/*create=*/false);
  if (!key) {
    report.origin = where + " (signed, but not provably by this user: " +
                    llvm::toString(key.takeError()) + ")";
    return;
  }
  // Every cubin entry must have been read for the signature to cover the
  // file's cubins (an unreadable one cannot be put back in its place).
  const bool complete = parsed.cubins.size() == parsed.cubin_entries;
  const std::string expected = origin_signature(*key, o, parsed.cubins);
  // Compared in constant time, as signatures are.
  unsigned char difference = expected.size() != o.signature.size();
  for (size_t i = 0; i < std::min(expected.size(), o.signature.size()); ++i)
    difference |= static_cast<unsigned char>(expected[i] ^ o.signature[i]);
  if (!complete || difference) {
    report.origin = where + " (its signature does not check under this user's origin key: "
                            "another user's or machine's export, or one changed since)";
    return;
  }
  report.same_origin = true;
  report.origin = where + " (this user's own export: its signature checks)";
}

// Keeps the parsed cubins that may be stored: all of them from this
// user's own export (or as the caller says), else those that reproduce.
llvm::Error verify_cubins(const ImportOptions &options, ParsedExport &parsed,
                          ImportReport &report) {
  if (parsed.cubins.empty()) return llvm::Error::success();
  const bool verify = options.verify == ImportOptions::Verify::always ||
                      (options.verify == ImportOptions::Verify::foreign && !report.same_origin);
  if (!verify) return llvm::Error::success();
  report.cubins_verified = true;
  std::vector<std::string> verdicts =
      options.reproduce
          ? options.reproduce(parsed.cubins)
          : std::vector<std::string>(parsed.cubins.size(),
                                     "not verified: this import has no way to recompile it");
  if (verdicts.size() != parsed.cubins.size())
    return yaml_error(llvm::formatv("verifying cubins: {0} verdicts for {1} cubins",
                                    verdicts.size(), parsed.cubins.size()));
  std::vector<CubinRecord> kept;
  for (size_t i = 0; i < parsed.cubins.size(); ++i) {
    if (verdicts[i].empty()) {
      kept.push_back(std::move(parsed.cubins[i]));
      continue;
    }
    ++report.cubins_refused;
    report.skipped.push_back(llvm::formatv("{0}: refused: {1} (key {2}): {3}",
                                           parsed.cubin_places[i], parsed.cubins[i].kernel_id,
                                           llvm::StringRef(parsed.cubins[i].key).take_front(16),
                                           verdicts[i]));
  }
  parsed.cubins = std::move(kept);
  return llvm::Error::success();
}

}  // namespace

llvm::Error TuningDb::export_yaml(llvm::StringRef file, bool include_cubins) {
  std::vector<TuningRecord> tunings;
  std::vector<CubinRecord> cubins;
  {
    // One read transaction: tunings and cubins from the same snapshot.
    std::lock_guard lock(impl_->mutex);
    if (llvm::Error e = impl_->db.exec("BEGIN")) return e;
    auto t = cache_detail::select_tunings(impl_->db);
    auto c = include_cubins ? cache_detail::select_cubins(impl_->db, true)
                            : llvm::Expected<std::vector<CubinRecord>>(std::vector<CubinRecord>());
    llvm::consumeError(impl_->db.exec("COMMIT"));
    if (!t) return t.takeError();
    if (!c) return c.takeError();
    tunings = std::move(*t);
    cubins = std::move(*c);
  }

  // Signed only when it carries cubins (the code that a signature spares
  // from recompiling), and only where this user has, or can make, an
  // origin key: without one the export is simply unsigned.
  ExportOrigin origin = current_origin(path());
  if (!cubins.empty()) {
    if (auto key = load_origin_key(/*create=*/true))
      origin.signature = origin_signature(*key, origin, cubins);
    else
      llvm::consumeError(key.takeError());
  }

  std::string text;
  try {
    YAML::Emitter out;
    out.SetDoublePrecision(17);  // doubles read back bit-exact
    out << YAML::BeginMap;
    out << YAML::Key << "flashjit_db_export" << YAML::Value << kExportFormat;
    out << YAML::Key << "schema_version" << YAML::Value << kSchemaVersion;
    emit_origin(out, origin);
    out << YAML::Key << "tunings" << YAML::Value << YAML::BeginSeq;
    for (const TuningRecord &record : tunings) emit_tuning(out, record);
    out << YAML::EndSeq;
    out << YAML::Key << "cubins" << YAML::Value << YAML::BeginSeq;
    for (const CubinRecord &record : cubins) emit_cubin(out, record);
    out << YAML::EndSeq << YAML::EndMap;
    if (!out.good()) return yaml_error(file + ": writing YAML: " + out.GetLastError());
    text = std::string(out.c_str(), out.size()) + "\n";
  } catch (const YAML::Exception &e) {
    return from_yaml_exception(file, e);
  }

  // Written beside the target and renamed over it, so a full disk or a
  // crash never leaves half an export under the name asked for.
  int fd = -1;
  llvm::SmallString<256> temporary;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueFile(file + ".tmp-%%%%%%", fd, temporary))
    return yaml_error(file + ": cannot write: " + ec.message());
  {
    llvm::raw_fd_ostream stream(fd, /*shouldClose=*/true);
    stream << text;
    stream.close();
    if (stream.has_error()) {
      std::error_code ec = stream.error();
      stream.clear_error();
      llvm::sys::fs::remove(temporary);
      return yaml_error(file + ": cannot write: " + ec.message());
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(temporary, file)) {
    llvm::sys::fs::remove(temporary);
    return yaml_error(file + ": cannot write: " + ec.message());
  }
  return llvm::Error::success();
}

llvm::Expected<ImportReport> TuningDb::import_yaml(llvm::StringRef file,
                                                   const ImportOptions &options) {
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer) return yaml_error(file + ": cannot read: " + buffer.getError().message());

  ImportReport report;
  llvm::Expected<ParsedExport> parsed =
      parse_export_caught(file, (*buffer)->getBuffer(), options.accept_cubins, report);
  if (!parsed) return parsed.takeError();
  judge_origin(*parsed, report);
  if (llvm::Error e = verify_cubins(options, *parsed, report)) return e;

  // Everything valid lands in one transaction: an import is all or nothing
  // (a failure part-way leaves the database as it was).
  std::lock_guard lock(impl_->mutex);
  llvm::Expected<sqlite::Transaction> transaction = sqlite::Transaction::begin(impl_->db);
  if (!transaction) return transaction.takeError();
  for (const TuningRecord &record : parsed->tunings) {
    bool replaced = false;
    if (llvm::Error e = cache_detail::upsert_tuning(impl_->db, record, &replaced))
      return e;
    ++(replaced ? report.tunings_replaced : report.tunings_added);
  }
  for (const CubinRecord &record : parsed->cubins) {
    bool replaced = false;
    if (llvm::Error e = cache_detail::upsert_cubin(impl_->db, record, &replaced))
      return e;
    ++(replaced ? report.cubins_replaced : report.cubins_added);
  }
  if (llvm::Error e = transaction->commit()) return e;
  return report;
}

}  // namespace flashjit
