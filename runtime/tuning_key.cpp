#include "runtime/tuning_key.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>

#include "cache/tuning_fields.h"
#include "flashjit/enumerators.h"
#include "flashjit/kernel_config_fields.h"
#include "generator/kernel_spec.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/SHA256.h"

namespace flashjit {
namespace {

// flashjit_config.splits' bound (flashjit.h).
constexpr int kMaxStoredSplits = 256;

llvm::Error key_error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// Every field is length-prefixed, so no two different inputs hash the same
// byte stream ("ab"+"c" and "a"+"bc" differ), whatever the texts contain.
class KeyHasher {
 public:
  void add(llvm::StringRef text) {
    uint8_t length[8];
    llvm::support::endian::write64le(length, text.size());
    sha_.update(llvm::ArrayRef<uint8_t>(length, sizeof(length)));
    sha_.update(text);
  }
  std::string hex() { return llvm::toHex(sha_.final(), /*LowerCase=*/true); }

 private:
  llvm::SHA256 sha_;
};

// A KernelConfig field as the database keeps it (in StoredConfig's field of
// the same name): enums by their to_string() name, numbers as they are.
// Where the two tables disagree (no such field, another kind) nothing is
// stored, and load() says so; tests/unit/field_tables_test.cpp rules it out.
template <typename T>
void store(T value, llvm::StringRef name, StoredConfig &stored) {
  const tuning_fields::ConfigField *field = tuning_fields::find_config_field(name);
  if (!field) return;
  std::visit(
      [&](auto *out) {
        using Stored = std::remove_pointer_t<decltype(out)>;
        // The enum test first and alone: clang checks a branch whose
        // condition also names the lambda's parameter type at once, and
        // to_string has no overload for the arithmetic fields.
        if constexpr (std::is_enum_v<T>) {
          if constexpr (std::is_same_v<Stored, std::string>) *out = to_string(value);
        } else if constexpr (std::is_arithmetic_v<T> && std::is_arithmetic_v<Stored>) {
          *out = static_cast<Stored>(value);
        }
      },
      field->ref(stored));
}

// The reverse of store(): "" or what is wrong with the stored value.
template <typename T>
std::string load(const StoredConfig &stored, llvm::StringRef name, T &out) {
  const tuning_fields::ConfigField *field = tuning_fields::find_config_field(name);
  if (!field) return llvm::formatv("no field {0} (StoredConfig lacks it)", name).str();
  return std::visit(
      [&](auto *in) -> std::string {
        using Stored = std::remove_pointer_t<decltype(in)>;
        if constexpr (std::is_enum_v<T> && std::is_same_v<Stored, std::string>) {
          if (from_string(*in, out)) return "";
          return llvm::formatv("{0} '{1}' (expected {2})", name, *in, enumerator_list<T>()).str();
        } else if constexpr (std::is_arithmetic_v<T> && std::is_arithmetic_v<Stored>) {
          out = static_cast<T>(*in);
          return "";
        } else {
          return llvm::formatv("{0} of another kind than KernelConfig's", name).str();
        }
      },
      tuning_fields::ref(*field, stored));
}

}  // namespace

int size_bucket(int64_t x) {
  if (x <= 1) return 0;
  return static_cast<int>(llvm::Log2_64_Ceil(static_cast<uint64_t>(x)));
}

ProblemClassKey problem_class_key(const Problem &problem, llvm::StringRef pass,
                                  llvm::StringRef modifiers) {
  ProblemClassKey key;
  key.pass = pass.str();
  key.dtype = to_string(problem.dtype);
  key.head_dim_qk = problem.head_dim_qk;
  key.head_dim_v = problem.head_dim_v;
  // Normalised, so window(-1, 0) and causal share their tunings; the window's
  // bounds only mean something (and only split classes) for a real window.
  const MaskKind mask = normalized_mask(problem);
  key.mask = to_string(mask);
  // Chunked attention compiles another kernel and changes which tiles run:
  // its own classes, one per chunk length as windows are per bound.
  if (problem.attention_chunk > 0) key.mask += "+chunk" + std::to_string(problem.attention_chunk);
  if (mask == MaskKind::window) {
    key.window_left = problem.window_left;
    key.window_right = problem.window_right;
  }
  key.softcap = problem.softcap != 0.f;
  key.gqa_ratio = problem.heads_kv > 0 ? static_cast<int>(problem.heads_q / problem.heads_kv) : 1;
  // A packed batch's Q, K and V (and the kernel) differ from a dense one's:
  // a class of its own ("packed"), sized by class_view; over a paged cache
  // (the serving call) another ("packed-paged64").
  const std::string pages =
      problem.page_size > 0 ? "paged" + std::to_string(problem.page_size) : "";
  key.kv_layout = problem.varlen ? (pages.empty() ? "packed" : "packed-" + pages)
                                 : (pages.empty() ? "contiguous" : pages);
  key.modifiers = modifiers.str();
  // Normalised as the mask: an e4m3 cache under e4m3 queries is `same`, and
  // an out_dtype that names the default output is `auto`, so that the
  // spellings of one kernel share its tunings.
  key.kv_dtype = problem.dtype != DType::e4m3 && problem.kv_dtype == KvDType::e4m3 ? "e4m3" : "same";
  Problem automatic = problem;
  automatic.out_dtype = OutDType::automatic;
  key.out_dtype = out_element(problem) == out_element(automatic) ? "auto" : to_string(problem.out_dtype);
  key.seqlen_q_bucket = size_bucket(problem.seqlen_q);
  key.seqlen_k_bucket = size_bucket(problem.seqlen_k);
  key.batch_heads_bucket = size_bucket(problem.batch * problem.heads_q);
  return key;
}

Problem class_view(const Problem &problem, int64_t total_q) {
  Problem view = problem;
  if (problem.varlen && total_q > 0 && problem.seqlen_q > 0)
    view.batch = (total_q + problem.seqlen_q - 1) / problem.seqlen_q;
  return view;
}

const char *class_pass(Pass pass, bool deterministic) {
  if (pass == Pass::forward) return "fwd";
  return deterministic ? "bwd-det" : "bwd";
}

DeviceFingerprint device_fingerprint(const DeviceInfo &device) {
  DeviceFingerprint fp;
  fp.name = device.name;
  fp.cc_major = device.cc_major;
  fp.cc_minor = device.cc_minor;
  fp.sm_count = device.sm_count;
  fp.driver_version = device.driver_version;
  return fp;
}

llvm::Expected<SoftwareFingerprint> software_fingerprint() {
  auto version = nvrtc_version();
  if (!version) return version.takeError();
  SoftwareFingerprint fp;
  fp.nvrtc_version = std::move(*version);
  fp.templates_hash = templates_hash();
  return fp;
}

std::string cubin_key(const GeneratedSource &source, const TargetArch &arch,
                      llvm::StringRef nvrtc_version) {
  KeyHasher h;
  h.add("flashjit-cubin-v2");  // bump when the key's recipe changes
  h.add(source.entry);
  h.add(source.source);
  // Headers in their order: NVRTC resolves #include by name, so a renamed
  // header is a different program even with the same text. The embedded
  // templates (every generated program's headers) are named by their
  // build-time hash of every name and text: hashing their ~0.5 MB again
  // took most of a process's first call served from the database (SHA-256
  // was 41% of the host-overhead program's time against the stand-in driver).
  const llvm::ArrayRef<TemplateFile> embedded = embedded_templates();
  if (source.headers.data() == embedded.data() && source.headers.size() == embedded.size()) {
    h.add("embedded-templates");
    h.add(templates_hash());
  } else {
    h.add(llvm::formatv("{0}", source.headers.size()).str());
    for (const TemplateFile &header : source.headers) {
      h.add(header.name);
      h.add(header.text);
    }
  }
  // Options are joined with a separator a single option never contains
  // unescaped (NUL), so ["-a b"] and ["-a", "b"] differ.
  std::string options;
  for (const std::string &o : source.options) {
    options += o;
    options.push_back('\0');
  }
  h.add(options);
  h.add(nvrtc_version);
  h.add(arch.name());
  return h.hex();
}

std::string config_text(const StoredConfig &c) {
  std::string text =
      llvm::formatv("{0} {1}x{2} w{3} s{4}", c.path, c.block_m, c.block_n, c.warps, c.stages).str();
  // As describe(KernelConfig): only where they change the kernel.
  if (c.splits > 1) text += llvm::formatv(" splits={0}", c.splits).str();
  if (c.pack_gqa == "on") text += " pack_gqa";
  return text;
}

StoredConfig to_stored(const KernelConfig &config) {
  StoredConfig stored;
  for_each_kernel_config_field([&](const auto &field) {
    if (field.tuned) store(config.*field.member, field.name, stored);
  });
  return stored;
}

llvm::Expected<KernelConfig> from_stored(const StoredConfig &stored) {
  // The database is data another process wrote: a path of no family, or a
  // zero or negative tile field, would make a partial config the heuristic
  // silently completes.
  if (stored.path != to_string(KernelPath::sm80) && stored.path != to_string(KernelPath::sm90))
    return key_error(llvm::formatv("stored config has an unknown kernel path '{0}' "
                                   "(expected sm80 or sm90)",
                                   stored.path));
  struct Field {
    const char *name;
    int value;
  };
  for (Field f : {Field{"block_m", stored.block_m}, Field{"block_n", stored.block_n},
                  Field{"warps", stored.warps}, Field{"stages", stored.stages}})
    if (f.value <= 0)
      return key_error(
          llvm::formatv("stored config has {0}={1}: expected a positive value", f.name, f.value));
  // 0 and "auto" are KernelConfig's "the heuristic picks per call": what a
  // tuning of a config that leaves them open stores.
  if (stored.splits < 0 || stored.splits > kMaxStoredSplits)
    return key_error(llvm::formatv("stored config has splits={0}: expected 0 to {1}",
                                   stored.splits, kMaxStoredSplits));

  KernelConfig config;
  std::string unreadable;  // the first field that does not read back, and why
  for_each_kernel_config_field([&](const auto &field) {
    if (field.tuned && unreadable.empty())
      unreadable = load(stored, field.name, config.*field.member);
  });
  if (!unreadable.empty()) return key_error("stored config has " + unreadable);
  return config;
}

}  // namespace flashjit
