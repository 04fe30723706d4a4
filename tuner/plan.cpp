// Tuning plans in YAML. Every message names file:line and the key, because a
// plan is edited by hand and a typo must point at itself: unknown keys are
// errors, never ignored, and yaml-cpp's exceptions stop at this file.
#include "tuner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>

#include "generator/kernel_spec.h"
#include "generator/modifier_source.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "runtime/modifier_facts.h"
#include "yaml-cpp/yaml.h"
#include "templates/common/fwd_sm90_layout.cuh"

namespace flashjit {

namespace {

// The keys a problem (or `defaults`) may set; `name` only in a problem, since
// a shared name would make every entry's name the same.
const char *const kProblemKeys[] = {"dtype", "kv_dtype", "out_dtype", "batch",   "heads",    "heads_kv", "seqlen",
                                    "seqlen_q", "seqlen_k", "hdim",     "hdim_v",   "mask",
                                    "window",  "softcap", "scale",    "pass",     "passes",
                                    "deterministic", "page_size", "cache_seqlens", "varlen",
                                    "seqlens_q", "seqlens_k", "score_mod", "score_mod_grad",
                                    "mask_mod", "aux", "aux_values", "mask_mod_qk_only", "sinks",
                                    "name"};
constexpr int64_t kMaxLength = (int64_t(1) << 31) - 1;  // the kernels index rows with int
constexpr int64_t kMaxGrid = 65535;                     // batch and heads are grid dimensions

int line_of(const YAML::Node &node) { return node.Mark().line + 1; }

// Errors are built in the parser and turned into llvm::Error at the end, so
// the helpers can return them by value without threading Expected through.
struct PlanError {
  int line = 0;
  std::string message;
};

// One key's node and where it is written.
struct Field {
  YAML::Node value;
  int line = 0;
};
// The keys of one mapping (a problem or `defaults`).
using Fields = std::map<std::string, Field>;

std::string shown(const YAML::Node &node) {
  if (node.IsScalar()) return node.Scalar().empty() ? "''" : node.Scalar();
  if (node.IsSequence()) return node.size() ? "a list" : "an empty list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

PlanError key_error(const Field &field, llvm::StringRef key, llvm::StringRef expected) {
  return {field.line,
          llvm::formatv("key '{0}': expected {1}, got {2}", key, expected, shown(field.value))
              .str()};
}

std::optional<PlanError> read_fields(const YAML::Node &map, bool allow_name, Fields &out,
                                     llvm::StringRef where) {
  for (const auto &pair : map) {
    const std::string key = pair.first.IsScalar() ? pair.first.Scalar() : std::string();
    const int line = line_of(pair.first);
    bool known = false;
    for (const char *k : kProblemKeys) known |= key == k;
    if (!known || (key == "name" && !allow_name)) {
      if (key == "name")
        return PlanError{line, "key 'name': names a single problem, not defaults"};
      return PlanError{line, llvm::formatv("unknown key '{0}' in {1} (expected one of dtype, "
                                           "kv_dtype, out_dtype, batch, heads, heads_kv, seqlen, seqlen_q, seqlen_k, "
                                           "hdim, hdim_v, mask, window, softcap, scale, pass, "
                                           "passes, deterministic, page_size, cache_seqlens, "
                                           "varlen, seqlens_q, seqlens_k, score_mod, "
                                           "score_mod_grad, mask_mod, aux, aux_values, "
                                           "mask_mod_qk_only, sinks{2})",
                                           shown(pair.first), where, allow_name ? ", name" : "")
                                 .str()};
    }
    if (out.count(key)) return PlanError{line, llvm::formatv("key '{0}': given twice", key).str()};
    out[key] = Field{pair.second, line};
  }
  return std::nullopt;
}

// The problem's own value of `key`, else the defaults'.
const Field *lookup(const Fields &entry, const Fields &defaults, const std::string &key) {
  if (auto it = entry.find(key); it != entry.end()) return &it->second;
  if (auto it = defaults.find(key); it != defaults.end()) return &it->second;
  return nullptr;
}

// `too_large`, when given, is what a well-formed value above `hi` is told.
std::optional<PlanError> read_int(const Field &f, llvm::StringRef key, int64_t lo, int64_t hi,
                                  llvm::StringRef expected, int64_t &value,
                                  llvm::StringRef too_large = {}) {
  // getAsInteger rejects signs, spaces, fractions and trailing junk alike.
  if (!f.value.IsScalar() || llvm::StringRef(f.value.Scalar()).getAsInteger(10, value))
    return key_error(f, key, expected);
  if (value > hi && !too_large.empty()) return key_error(f, key, too_large);
  if (value < lo || value > hi) return key_error(f, key, expected);
  return std::nullopt;
}

std::optional<PlanError> read_float(const Field &f, llvm::StringRef key, llvm::StringRef expected,
                                    float &value) {
  const std::string text = f.value.IsScalar() ? f.value.Scalar() : std::string();
  char *end = nullptr;
  const double parsed = text.empty() ? NAN : std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(parsed) ||
      parsed < 0 || parsed > 3.0e38)
    return key_error(f, key, expected);
  value = static_cast<float>(parsed);
  return std::nullopt;
}

std::optional<PlanError> read_pass(const Field &f, llvm::StringRef key, Pass &pass) {
  const std::string text = f.value.IsScalar() ? f.value.Scalar() : std::string();
  if (text == "fwd") {
    pass = Pass::forward;
  } else if (text == "bwd") {
    pass = Pass::backward;
  } else {
    return PlanError{f.line, llvm::formatv("key '{0}': expected fwd or bwd, got {1}", key,
                                           shown(f.value))
                                 .str()};
  }
  return std::nullopt;
}

// The passes an entry asks for, in order: `pass` or `passes` (the entry's
// own over the defaults'; both in one mapping is a mistake), else the
// forward alone; and whether the backward is the deterministic mode.
std::optional<PlanError> read_passes(const Fields &entry, const Fields &defaults,
                                     std::vector<Pass> &passes, bool &deterministic) {
  for (const Fields *fields : {&entry, &defaults}) {
    auto one = fields->find("pass"), many = fields->find("passes");
    if (one != fields->end() && many != fields->end())
      return PlanError{many->second.line, "key 'passes': give pass or passes, not both"};
    if (one != fields->end()) {
      Pass pass = Pass::forward;
      if (auto e = read_pass(one->second, "pass", pass)) return e;
      passes = {pass};
      break;
    }
    if (many != fields->end()) {
      const Field &f = many->second;
      if (!f.value.IsSequence() || f.value.size() == 0)
        return key_error(f, "passes", "a list of fwd and bwd, like [fwd, bwd]");
      for (const YAML::Node &item : f.value) {
        Pass pass = Pass::forward;
        if (auto e = read_pass(Field{item, f.line}, "passes", pass)) return e;
        if (std::find(passes.begin(), passes.end(), pass) != passes.end())
          return PlanError{f.line, llvm::formatv("key 'passes': {0} given twice",
                                                 to_string(pass))
                                       .str()};
        passes.push_back(pass);
      }
      break;
    }
  }
  if (passes.empty()) passes = {Pass::forward};
  deterministic = false;
  if (const Field *f = lookup(entry, defaults, "deterministic")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : std::string();
    if (text != "true" && text != "false")
      return key_error(*f, "deterministic", "true or false");
    deterministic = text == "true";
    if (deterministic && std::find(passes.begin(), passes.end(), Pass::backward) == passes.end())
      return PlanError{f->line, "key 'deterministic': needs pass: bwd (it only changes the "
                                "backward)"};
  }
  return std::nullopt;
}

// A list of sequence lengths (each >= 0, at most 65535 of them, a total in
// (0, 2^31)).
std::optional<PlanError> read_lengths(const Field &f, llvm::StringRef key,
                                      std::vector<int64_t> &out) {
  constexpr const char *kLengths = "a list of sequence lengths >= 0, e.g. [17, 4096, 300]";
  if (!f.value.IsSequence() || f.value.size() == 0) return key_error(f, key, kLengths);
  if (f.value.size() > static_cast<size_t>(kMaxGrid))
    return key_error(f, key, "at most 65535 sequences (a grid dimension)");
  int64_t total = 0;
  for (const YAML::Node &item : f.value) {
    int64_t n = 0;
    if (!item.IsScalar() || llvm::StringRef(item.Scalar()).getAsInteger(10, n) || n < 0 ||
        n > kMaxLength)
      return PlanError{f.line, llvm::formatv("key '{0}': expected {1}, got {2}", key, kLengths,
                                             shown(item))
                                   .str()};
    out.push_back(n);
    total += n;
  }
  if (total == 0 || total > kMaxLength)
    return PlanError{f.line, llvm::formatv("key '{0}': expected a total in [1, 2147483647], got "
                                           "{1}",
                                           key, total)
                                 .str()};
  return std::nullopt;
}

// varlen: true, and the packed batch's lengths when given (they set the
// batch, the longest lengths and the totals).
std::optional<PlanError> read_packed(const Fields &entry, const Fields &defaults,
                                     PlanEntry &out) {
  Problem &p = out.problem;
  if (const Field *f = lookup(entry, defaults, "varlen")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : std::string();
    if (text != "true" && text != "false") return key_error(*f, "varlen", "true or false");
    p.varlen = text == "true";
  }
  const Field *lens_q = lookup(entry, defaults, "seqlens_q");
  const Field *lens_k = lookup(entry, defaults, "seqlens_k");
  if (!lens_q && !lens_k) return std::nullopt;
  const Field &first = lens_q ? *lens_q : *lens_k;
  const char *first_key = lens_q ? "seqlens_q" : "seqlens_k";
  if (!p.varlen) return key_error(first, first_key, "varlen: true beside it");
  if (!lens_q) return key_error(*lens_k, "seqlens_k", "seqlens_q beside it");
  for (const char *size : {"batch", "seqlen", "seqlen_q", "seqlen_k"})
    if (auto it = entry.find(size); it != entry.end())
      return PlanError{it->second.line,
                       llvm::formatv("key '{0}': not with seqlens_q (the lengths give the batch "
                                     "and the longest sequence)",
                                     size)
                           .str()};
  if (auto e = read_lengths(*lens_q, "seqlens_q", out.seqlens_q)) return e;
  if (lens_k) {
    if (auto e = read_lengths(*lens_k, "seqlens_k", out.seqlens_k)) return e;
    if (out.seqlens_k.size() != out.seqlens_q.size())
      return PlanError{lens_k->line,
                       llvm::formatv("key 'seqlens_k': expected {0} lengths, one per sequence "
                                     "of seqlens_q, got {1}",
                                     out.seqlens_q.size(), out.seqlens_k.size())
                           .str()};
  } else {
    out.seqlens_k = out.seqlens_q;
  }
  p.batch = static_cast<int64_t>(out.seqlens_q.size());
  p.seqlen_q = p.seqlen_k = 0;
  for (size_t b = 0; b < out.seqlens_q.size(); ++b) {
    p.seqlen_q = std::max(p.seqlen_q, out.seqlens_q[b]);
    p.seqlen_k = std::max(p.seqlen_k, out.seqlens_k[b]);
    out.total_q += out.seqlens_q[b];
    out.total_k += out.seqlens_k[b];
  }
  return std::nullopt;
}

// Builds one entry from its fields over the defaults; `line` is the entry's.
std::optional<PlanError> make_entry(const Fields &entry, const Fields &defaults, int line,
                                    PlanEntry &out) {
  Problem &p = out.problem;
  out.line = line;
  auto get = [&](const char *key) { return lookup(entry, defaults, key); };
  auto missing = [&](llvm::StringRef what) {
    return PlanError{line, llvm::formatv("problem: missing key {0} (give it in the problem or "
                                         "in defaults)",
                                         what)
                               .str()};
  };

  if (const Field *f = get("dtype")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : "";
    if (text == "bf16") {
      p.dtype = DType::bf16;
    } else if (text == "fp16") {
      p.dtype = DType::fp16;
    } else if (text == "e4m3") {
      p.dtype = DType::e4m3;
    } else {
      return key_error(*f, "dtype", "bf16, fp16 or e4m3");
    }
  }
  if (const Field *f = get("kv_dtype")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : "";
    if (text == "same") {
      p.kv_dtype = KvDType::same;
    } else if (text == "e4m3") {
      p.kv_dtype = KvDType::e4m3;
    } else {
      return key_error(*f, "kv_dtype", "same or e4m3");
    }
  }
  if (const Field *f = get("out_dtype")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : "";
    if (text == "auto") {
      p.out_dtype = OutDType::automatic;
    } else if (text == "bf16") {
      p.out_dtype = OutDType::bf16;
    } else if (text == "fp16") {
      p.out_dtype = OutDType::fp16;
    } else {
      return key_error(*f, "out_dtype", "auto, bf16 or fp16");
    }
    if (p.dtype != DType::e4m3 && p.out_dtype != OutDType::automatic &&
        out_element(p) != p.dtype)
      return key_error(*f, "out_dtype",
                       llvm::formatv("auto or {0} with dtype {0} (a 16-bit problem's output has "
                                     "its dtype)",
                                     to_string(p.dtype))
                           .str());
  }
  constexpr const char *kPositive = "a positive integer";
  constexpr const char *kGridMax = "at most 65535 (a grid dimension)";
  constexpr const char *kLengthMax = "at most 2147483647 (rows are 32-bit)";
  p.batch = 1;
  if (const Field *f = get("batch"))
    if (auto e = read_int(*f, "batch", 1, kMaxGrid, kPositive, p.batch, kGridMax)) return e;
  const Field *heads = get("heads");
  if (!heads) return missing("'heads'");
  if (auto e = read_int(*heads, "heads", 1, kMaxGrid, kPositive, p.heads_q, kGridMax)) return e;
  p.heads_kv = p.heads_q;
  if (const Field *f = get("heads_kv")) {
    const std::string expected = llvm::formatv("a divisor of heads ({0})", p.heads_q).str();
    if (auto e = read_int(*f, "heads_kv", 1, p.heads_q, expected, p.heads_kv)) return e;
    if (p.heads_q % p.heads_kv) return key_error(*f, "heads_kv", expected);
  }

  if (auto e = read_packed(entry, defaults, out)) return e;
  // The problem's own seqlen (or seqlen_q/_k) wins over any of the defaults';
  // a packed batch's lengths (read_packed) give them instead.
  if (out.seqlens_q.empty()) {
    const Field *seqlen_q = nullptr, *seqlen_k = nullptr;
    for (const Fields *fields : {&entry, &defaults}) {
      auto it = fields->find("seqlen");
      const Field *both = it == fields->end() ? nullptr : &it->second;
      auto q = fields->find("seqlen_q"), k = fields->find("seqlen_k");
      if (!seqlen_q) seqlen_q = q != fields->end() ? &q->second : both;
      if (!seqlen_k) seqlen_k = k != fields->end() ? &k->second : both;
    }
    if (!seqlen_q || !seqlen_k)
      return missing(!seqlen_q && !seqlen_k ? "'seqlen' (or 'seqlen_q' and 'seqlen_k')"
                     : !seqlen_q            ? "'seqlen_q' (or 'seqlen')"
                                            : "'seqlen_k' (or 'seqlen')");
    auto seqlen_key = [&](const Field *f, const char *own) {
      for (const Fields *fields : {&entry, &defaults})
        if (auto it = fields->find(own); it != fields->end() && &it->second == f) return own;
      return "seqlen";
    };
    if (auto e = read_int(*seqlen_q, seqlen_key(seqlen_q, "seqlen_q"), 1, kMaxLength, kPositive,
                          p.seqlen_q, kLengthMax))
      return e;
    if (auto e = read_int(*seqlen_k, seqlen_key(seqlen_k, "seqlen_k"), 1, kMaxLength, kPositive,
                          p.seqlen_k, kLengthMax))
      return e;
  }

  // Past 256 on sm_90a only (the kernels refuse with their reasons).
  constexpr int kMaxHeadDim = kSm90ForwardMaxHeadDim;
  constexpr const char *kHeadDim = "a multiple of 8 in [8, 576]";
  const Field *hdim = get("hdim");
  if (!hdim) return missing("'hdim'");
  int64_t d = 0;
  if (auto e = read_int(*hdim, "hdim", 8, kMaxHeadDim, kHeadDim, d)) return e;
  if (d % 8) return key_error(*hdim, "hdim", kHeadDim);
  p.head_dim_qk = p.head_dim_v = static_cast<int>(d);
  if (const Field *f = get("hdim_v")) {
    if (auto e = read_int(*f, "hdim_v", 8, kMaxHeadDim, kHeadDim, d)) return e;
    if (d % 8) return key_error(*f, "hdim_v", kHeadDim);
    p.head_dim_v = static_cast<int>(d);
  }

  const Field *mask = get("mask");
  if (mask && !mask->value.IsScalar()) return key_error(*mask, "mask", "none, causal or window");
  const std::string mask_text = mask && mask->value.IsScalar() ? mask->value.Scalar() : "none";
  if (mask_text == "none") {
    p.mask = MaskKind::none;
  } else if (mask_text == "causal") {
    p.mask = MaskKind::causal;
  } else if (mask_text == "window") {
    p.mask = MaskKind::window;
  } else {
    return key_error(*mask, "mask", "none, causal or window");
  }
  // `window` in the defaults serves the problems that say mask: window; one
  // written beside another mask is a mistake.
  constexpr const char *kWindow = "[left, right], each -1 (unbounded) or >= 0";
  if (auto it = entry.find("window"); it != entry.end() && p.mask != MaskKind::window)
    return PlanError{it->second.line,
                     llvm::formatv("key 'window': needs mask: window, got mask: {0}", mask_text)
                         .str()};
  if (p.mask == MaskKind::window) {
    const Field *window = get("window");
    if (!window) return missing("'window' ([left, right], for mask: window)");
    const YAML::Node &w = window->value;
    if (!w.IsSequence() || w.size() != 2) return key_error(*window, "window", kWindow);
    for (size_t i = 0; i < 2; ++i) {
      int64_t bound = 0;
      if (!w[i].IsScalar() || llvm::StringRef(w[i].Scalar()).getAsInteger(10, bound) ||
          bound < -1)
        return PlanError{window->line,
                         llvm::formatv("key 'window': expected {0}, got {1}", kWindow,
                                       shown(w[i]))
                             .str()};
      (i == 0 ? p.window_left : p.window_right) = bound;
    }
  }

  if (const Field *f = get("softcap"))
    if (auto e = read_float(*f, "softcap", "a finite number >= 0 (0: off)", p.softcap)) return e;
  if (const Field *f = get("scale"))
    if (auto e = read_float(*f, "scale", "a finite number >= 0 (0: 1/sqrt(hdim))",
                            p.softmax_scale))
      return e;

  // A KV cache (forward): its page size, and per-sequence key counts.
  if (const Field *f = get("page_size")) {
    constexpr const char *kPage = "0 (contiguous) or 1 to 512 rows";
    int64_t page = 0;
    if (auto e = read_int(*f, "page_size", 0, 512, kPage, page)) return e;
    p.page_size = static_cast<int>(page);
  }
  if (const Field *f = get("cache_seqlens")) {
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : std::string();
    if (text != "true" && text != "false") return key_error(*f, "cache_seqlens", "true or false");
    p.seqused_k = text == "true";
  }

  if (llvm::Error e = validate_problem(p)) return PlanError{line, llvm::toString(std::move(e))};

  if (auto it = entry.find("name"); it != entry.end()) {
    if (!it->second.value.IsScalar() || it->second.value.Scalar().empty())
      return key_error(it->second, "name", "a non-empty string");
    out.name = it->second.value.Scalar();
  } else {
    out.name = describe(p);
  }
  return std::nullopt;
}

// A caller's modifiers (include/flashjit/modifiers.h): score_mod,
// score_mod_grad and mask_mod name files of CUDA source (relative to the
// plan's folder), aux their extra inputs' declarations, mask_mod_qk_only
// (absent: left to the probe) and sinks flags. Checked as a call checks
// them; a score_mod's backward needs its score_mod_grad, given or defined
// in the score_mod's file.
std::optional<PlanError> read_modifiers(const Fields &entry, const Fields &defaults, int line,
                                        llvm::StringRef file, Modifiers &m) {
  auto get = [&](const char *key) { return lookup(entry, defaults, key); };
  for (auto [key, text] : {std::pair{"score_mod", &m.score_mod},
                           std::pair{"score_mod_grad", &m.score_mod_grad},
                           std::pair{"mask_mod", &m.mask_mod}}) {
    const Field *f = get(key);
    if (!f) continue;
    if (!f->value.IsScalar() || f->value.Scalar().empty())
      return key_error(*f, key, "the path of a CUDA source file");
    llvm::SmallString<256> path(f->value.Scalar());
    if (llvm::sys::path::is_relative(path)) {
      llvm::SmallString<256> folder(llvm::sys::path::parent_path(file));
      llvm::sys::path::append(folder, path);
      path = folder;
    }
    auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
    if (!buffer)
      return PlanError{f->line, llvm::formatv("key '{0}': cannot read {1}: {2}", key, path,
                                              buffer.getError().message())
                                    .str()};
    *text = (*buffer)->getBuffer().str();
    if (llvm::StringRef(*text).trim().empty())
      return PlanError{f->line, llvm::formatv("key '{0}': {1} is empty", key, path).str()};
    // Workers receive the snippets as JSON strings: UTF-8 only.
    if (auto at = first_non_utf8_byte(*text))
      return PlanError{f->line, llvm::formatv("key '{0}': {1} is not UTF-8 text (byte {2})",
                                              key, path, *at)
                                    .str()};
  }
  if (const Field *f = get("aux")) {
    if (!f->value.IsScalar())
      return key_error(*f, "aux", "declarations such as \"const float* slopes, int prefix\"");
    auto fields = parse_aux_declarations(f->value.Scalar());
    if (!fields) {
      // Without the CLI flag's name the parser puts in front.
      std::string why = llvm::toString(fields.takeError());
      if (llvm::StringRef(why).startswith("--aux: ")) why = why.substr(7);
      return PlanError{f->line, "key 'aux': " + why};
    }
    m.aux = std::move(*fields);
  }
  for (const char *key : {"mask_mod_qk_only", "sinks"}) {
    const Field *f = get(key);
    if (!f) continue;
    const std::string text = f->value.IsScalar() ? f->value.Scalar() : std::string();
    if (text != "true" && text != "false") return key_error(*f, key, "true or false");
    if (llvm::StringRef(key) == "sinks")
      m.sinks = text == "true";
    else  // absent: left to the probe (Modifiers::mask_mod_qk_only)
      m.mask_mod_qk_only = text == "true" ? MaskModQkOnly::on : MaskModQkOnly::off;
  }
  if (llvm::Error e = validate_modifiers(m)) return PlanError{line, llvm::toString(std::move(e))};
  return std::nullopt;
}

// aux_values: {prefix: 1024, ...}, the scalar aux fields' values a tune
// runs the modifiers with (as --aux-value NAME=VALUE); each must name a
// scalar field of `aux` (whether every one has a value is the tune's check:
// precompile and query need none).
std::optional<PlanError> read_aux_values(const Fields &entry, const Fields &defaults,
                                         const Modifiers &m, std::vector<std::string> &out) {
  const Field *f = lookup(entry, defaults, "aux_values");
  if (!f) return std::nullopt;
  constexpr const char *kExpected = "a mapping of scalar aux fields to values, e.g. {prefix: 1024}";
  if (!f->value.IsMap()) return key_error(*f, "aux_values", kExpected);
  for (const auto &pair : f->value) {
    if (!pair.first.IsScalar() || !pair.second.IsScalar() || pair.second.Scalar().empty())
      return key_error(*f, "aux_values", kExpected);
    const std::string name = pair.first.Scalar();
    auto field = std::find_if(m.aux.begin(), m.aux.end(),
                              [&](const AuxField &a) { return a.name == name; });
    if (field == m.aux.end())
      return PlanError{f->line, llvm::formatv("key 'aux_values': no aux field '{0}' (key 'aux' "
                                              "declares the fields)",
                                              name)
                                    .str()};
    if (llvm::StringRef(field->type).endswith("*"))
      return PlanError{f->line, llvm::formatv("key 'aux_values': '{0}' is a pointer ({1}): "
                                              "flashjit generates its values",
                                              name, field->type)
                                    .str()};
    out.push_back(name + "=" + pair.second.Scalar());
  }
  return std::nullopt;
}

std::optional<PlanError> parse_root(const YAML::Node &root, llvm::StringRef file,
                                    TuningPlan &plan) {
  if (!root.IsMap())
    return PlanError{root.IsDefined() && !root.IsNull() ? line_of(root) : 1,
                     "expected a mapping with keys name, defaults and problems"};
  YAML::Node defaults_node, problems_node;
  int problems_line = 0;
  llvm::StringSet<> seen;
  for (const auto &pair : root) {
    const std::string key = pair.first.IsScalar() ? pair.first.Scalar() : std::string();
    const int line = line_of(pair.first);
    if (!seen.insert(key).second)
      return PlanError{line, llvm::formatv("key '{0}': given twice", key).str()};
    if (key == "name") {
      if (!pair.second.IsScalar() || pair.second.Scalar().empty())
        return key_error(Field{pair.second, line}, "name", "a non-empty string");
      plan.name = pair.second.Scalar();
    } else if (key == "defaults") {
      if (!pair.second.IsMap() && !pair.second.IsNull())
        return key_error(Field{pair.second, line}, "defaults", "a mapping of problem keys");
      defaults_node = pair.second;
    } else if (key == "problems") {
      problems_node = pair.second;
      problems_line = line;
    } else {
      return PlanError{line, llvm::formatv("unknown key '{0}' (expected name, defaults or "
                                           "problems)",
                                           shown(pair.first))
                                 .str()};
    }
  }
  if (!problems_line) return PlanError{line_of(root), "missing key 'problems'"};
  if (!problems_node.IsSequence() || problems_node.size() == 0)
    return key_error(Field{problems_node, problems_line}, "problems",
                     "a non-empty list of problems");
  if (plan.name.empty()) plan.name = llvm::sys::path::stem(file).str();

  Fields defaults;
  if (defaults_node.IsMap())
    if (auto e = read_fields(defaults_node, /*allow_name=*/false, defaults, "defaults")) return e;
  for (const YAML::Node &item : problems_node) {
    const int line = line_of(item);
    if (!item.IsMap())
      return key_error(Field{item, line}, "problems", "each item a mapping of problem keys");
    Fields entry;
    if (auto e = read_fields(item, /*allow_name=*/true, entry, "problem")) return e;
    PlanEntry out;
    if (auto e = make_entry(entry, defaults, line, out)) return e;
    if (auto e = read_modifiers(entry, defaults, line, file, out.modifiers)) return e;
    if (auto e = read_aux_values(entry, defaults, out.modifiers, out.aux_values)) return e;
    // A generated name tells entries of other modifiers apart.
    if (!out.modifiers.empty() && !entry.count("name"))
      out.name += " mod=" + modifiers_hash(out.modifiers);
    std::vector<Pass> passes;
    if (auto e = read_passes(entry, defaults, passes, out.deterministic)) return e;
    const bool fp8 = out.problem.dtype == DType::e4m3 || out.problem.kv_dtype == KvDType::e4m3;
    for (Pass pass : passes)
      if (pass == Pass::backward && fp8)
        return PlanError{line, "pass bwd with e4m3 (dtype or kv_dtype): the fp8 backward is not "
                               "supported (FlashAttention-3 has none either); tune its forward "
                               "alone (pass: fwd)"};
    // A backward's derivative: key score_mod_grad's, or the one the
    // score_mod's file defines (a probe compile finds it), not both.
    for (Pass pass : passes) {
      if (pass != Pass::backward || out.modifiers.score_mod.empty()) continue;
      auto defined = score_mod_defines_grad(out.modifiers);
      if (!defined) return PlanError{line, llvm::toString(defined.takeError())};
      if (*defined && !out.modifiers.score_mod_grad.empty())
        return PlanError{line,
                         "key score_mod_grad and the score_mod_grad that key score_mod's "
                         "file defines: give one of them"};
      if (!*defined && out.modifiers.score_mod_grad.empty())
        return PlanError{line,
                         "pass bwd with a score_mod needs a score_mod_grad (d score_mod / "
                         "d score), which the backward scales by: define " +
                             score_mod_grad_signature(out.modifiers) +
                             " in the score_mod's file, or give key score_mod_grad"};
    }
    const std::string name = out.name;
    for (Pass pass : passes) {
      out.pass = pass;
      out.name = name + pass_suffix(pass, out.deterministic);
      plan.entries.push_back(out);
    }
  }
  return std::nullopt;
}

llvm::Error plan_error(llvm::StringRef file, int line, const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 llvm::formatv("{0}:{1}: {2}", file, line, message.str()).str());
}

}  // namespace

std::optional<PackedBatch> entry_packed_batch(const PlanEntry &entry) {
  if (!entry.problem.varlen) return std::nullopt;
  if (entry.seqlens_q.empty()) return equal_lengths(entry.problem);
  return PackedBatch{entry.seqlens_q, entry.seqlens_k};
}

std::string pass_suffix(Pass pass, bool deterministic) {
  if (pass == Pass::forward) return "";
  return deterministic ? " (bwd-det)" : " (bwd)";
}

llvm::Expected<TuningPlan> parse_plan(llvm::StringRef text, llvm::StringRef file) {
  TuningPlan plan;
  plan.file = file.str();
  // yaml-cpp reports everything by exception; none may cross this boundary.
  try {
    const YAML::Node root = YAML::Load(text.str());
    if (auto e = parse_root(root, file, plan)) return plan_error(file, e->line, e->message);
  } catch (const YAML::Exception &e) {
    const int line = e.mark.is_null() ? 1 : e.mark.line + 1;
    return plan_error(file, line, "invalid YAML: " + e.msg);
  }
  return plan;
}

llvm::Expected<TuningPlan> load_plan(llvm::StringRef file) {
  auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/true);
  if (!buffer)
    return llvm::createStringError(
        buffer.getError(), llvm::formatv("{0}: cannot read: {1}", file, buffer.getError().message())
                               .str());
  return parse_plan((*buffer)->getBuffer(), file);
}

}  // namespace flashjit
