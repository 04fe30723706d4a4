#include "tuner/worker_protocol.h"

#include "runtime/runtime_counters.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::worker_protocol {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The enumerator whose to_string() is `text`; the enums are small and dense.
template <typename Enum>
llvm::Expected<Enum> enum_field(const llvm::json::Object &object, llvm::StringRef key,
                                int count) {
  auto text = string_field(object, key);
  if (!text) return text.takeError();
  for (int i = 0; i < count; ++i)
    if (*text == to_string(Enum(i))) return Enum(i);
  return error(llvm::formatv("worker request: '{0}': unknown value '{1}'", key, *text));
}

}  // namespace

llvm::Expected<int64_t> integer_field(const llvm::json::Object &object, llvm::StringRef key) {
  if (auto value = object.getInteger(key)) return *value;
  return error("worker request: '" + key + "': expected an integer");
}

llvm::Expected<double> number_field(const llvm::json::Object &object, llvm::StringRef key) {
  if (auto value = object.getNumber(key)) return *value;
  return error("worker request: '" + key + "': expected a number");
}

llvm::Expected<std::string> string_field(const llvm::json::Object &object, llvm::StringRef key) {
  if (auto value = object.getString(key)) return value->str();
  return error("worker request: '" + key + "': expected a string");
}

llvm::Expected<Pass> pass_field(const llvm::json::Object &object, llvm::StringRef key) {
  return enum_field<Pass>(object, key, 2);
}

llvm::Expected<const llvm::json::Object &> object_field(const llvm::json::Object &object,
                                                        llvm::StringRef key) {
  if (const llvm::json::Object *value = object.getObject(key)) return *value;
  return error("worker request: '" + key + "': expected an object");
}

llvm::json::Object problem_to_json(const Problem &p) {
  return llvm::json::Object{{"dtype", to_string(p.dtype)},
                            {"batch", p.batch},
                            {"heads_q", p.heads_q},
                            {"heads_kv", p.heads_kv},
                            {"seqlen_q", p.seqlen_q},
                            {"seqlen_k", p.seqlen_k},
                            {"head_dim_qk", p.head_dim_qk},
                            {"head_dim_v", p.head_dim_v},
                            {"mask", to_string(p.mask)},
                            {"window_left", p.window_left},
                            {"window_right", p.window_right},
                            // floats are exact as doubles, both ways
                            {"softmax_scale", double(p.softmax_scale)},
                            {"softcap", double(p.softcap)}};
}

llvm::Expected<Problem> problem_from_json(const llvm::json::Object &o) {
  Problem p;
  auto dtype = enum_field<DType>(o, "dtype", 2);
  if (!dtype) return dtype.takeError();
  p.dtype = *dtype;
  auto mask = enum_field<MaskKind>(o, "mask", 3);
  if (!mask) return mask.takeError();
  p.mask = *mask;
  struct Int64Field {
    const char *key;
    int64_t *out;
  };
  for (const Int64Field &f : {Int64Field{"batch", &p.batch}, Int64Field{"heads_q", &p.heads_q},
                              Int64Field{"heads_kv", &p.heads_kv},
                              Int64Field{"seqlen_q", &p.seqlen_q},
                              Int64Field{"seqlen_k", &p.seqlen_k},
                              Int64Field{"window_left", &p.window_left},
                              Int64Field{"window_right", &p.window_right}}) {
    auto value = integer_field(o, f.key);
    if (!value) return value.takeError();
    *f.out = *value;
  }
  auto dqk = integer_field(o, "head_dim_qk"), dv = integer_field(o, "head_dim_v");
  if (!dqk) return dqk.takeError();
  if (!dv) return dv.takeError();
  p.head_dim_qk = int(*dqk);
  p.head_dim_v = int(*dv);
  auto scale = number_field(o, "softmax_scale"), softcap = number_field(o, "softcap");
  if (!scale) return scale.takeError();
  if (!softcap) return softcap.takeError();
  p.softmax_scale = float(*scale);
  p.softcap = float(*softcap);
  return p;
}

llvm::json::Object spec_to_json(const KernelSpec &s) {
  return llvm::json::Object{
      {"pass", to_string(s.pass)},
      {"dtype", to_string(s.dtype)},
      {"head_dim_qk", s.head_dim_qk},
      {"head_dim_v", s.head_dim_v},
      {"mask", to_string(s.mask)},
      {"softcap", s.softcap},
      {"config", llvm::json::Object{{"path", to_string(s.config.path)},
                                    {"block_m", s.config.block_m},
                                    {"block_n", s.config.block_n},
                                    {"warps", s.config.warps},
                                    {"stages", s.config.stages},
                                    {"deterministic", s.config.deterministic},
                                    {"splits", s.config.splits},
                                    {"pack_gqa", to_string(s.config.pack_gqa)}}},
      // Derived from the config and the problem, which the worker does not
      // have: the kernel's packed heads and whether it splits the keys.
      {"pack_gqa", s.pack_gqa},
      {"split_kv", s.split_kv},
      {"arch", s.arch.name()}};
}

llvm::Expected<KernelSpec> spec_from_json(const llvm::json::Object &o) {
  KernelSpec s;
  auto pass = pass_field(o, "pass");
  if (!pass) return pass.takeError();
  s.pass = *pass;
  auto dtype = enum_field<DType>(o, "dtype", 2);
  if (!dtype) return dtype.takeError();
  s.dtype = *dtype;
  auto mask = enum_field<MaskKind>(o, "mask", 3);
  if (!mask) return mask.takeError();
  s.mask = *mask;
  auto dqk = integer_field(o, "head_dim_qk"), dv = integer_field(o, "head_dim_v");
  if (!dqk) return dqk.takeError();
  if (!dv) return dv.takeError();
  s.head_dim_qk = int(*dqk);
  s.head_dim_v = int(*dv);
  s.softcap = o.getBoolean("softcap").getValueOr(false);
  auto config = object_field(o, "config");
  if (!config) return config.takeError();
  auto path = enum_field<KernelPath>(*config, "path", 3);
  if (!path) return path.takeError();
  s.config.path = *path;
  struct IntField {
    const char *key;
    int *out;
  };
  for (const IntField &f :
       {IntField{"block_m", &s.config.block_m}, IntField{"block_n", &s.config.block_n},
        IntField{"warps", &s.config.warps}, IntField{"stages", &s.config.stages},
        IntField{"splits", &s.config.splits}}) {
    auto value = integer_field(*config, f.key);
    if (!value) return value.takeError();
    *f.out = int(*value);
  }
  s.config.deterministic = config->getBoolean("deterministic").getValueOr(false);
  auto pack_gqa = enum_field<GqaPacking>(*config, "pack_gqa", 3);
  if (!pack_gqa) return pack_gqa.takeError();
  s.config.pack_gqa = *pack_gqa;
  auto packed_heads = integer_field(o, "pack_gqa");
  if (!packed_heads) return packed_heads.takeError();
  s.pack_gqa = int(*packed_heads);
  if (auto split = o.getBoolean("split_kv"))
    s.split_kv = *split;
  else
    return error("worker request: 'split_kv': expected true or false");
  auto arch_text = string_field(o, "arch");
  if (!arch_text) return arch_text.takeError();
  auto arch = TargetArch::parse(*arch_text);
  if (!arch) return arch.takeError();
  s.arch = *arch;
  return s;
}

llvm::json::Object error_reply(const std::string &message, bool fatal) {
  return llvm::json::Object{{"ok", false}, {"error", message}, {"fatal", fatal}};
}

}  // namespace flashjit::worker_protocol

namespace flashjit {

void count_worker_compiles(const llvm::json::Object &reply) {
  if (auto compiles = reply.getInteger("compiles"); compiles && *compiles > 0)
    runtime_counters().compiles.fetch_add(uint64_t(*compiles), std::memory_order_relaxed);
}

}  // namespace flashjit
