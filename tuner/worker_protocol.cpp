#include "tuner/worker_protocol.h"

#include <type_traits>

#include "flashjit/enumerators.h"
#include "flashjit/kernel_config_fields.h"
#include "flashjit/problem_fields.h"
#include "generator/field_json.h"
#include "generator/modifier_source.h"
#include "runtime/runtime_counters.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit::worker_protocol {
namespace {

llvm::Error error(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message.str());
}

// The one of `values` whose to_string() is the text of `key`.
template <typename Enum>
llvm::Expected<Enum> enum_field(const llvm::json::Object &object, llvm::StringRef key,
                                llvm::ArrayRef<Enum> values) {
  auto text = string_field(object, key);
  if (!text) return text.takeError();
  for (Enum value : values)
    if (*text == to_string(value)) return value;
  return error(llvm::formatv("worker request: '{0}': unknown value '{1}'", key, *text));
}

// A field of the Problem or KernelConfig table, written by field_json. A flag
// may be left out (false), so that a request reads as short as it can.
template <typename T>
llvm::Error read_field(const llvm::json::Object &object, llvm::StringRef key, T &out) {
  if constexpr (std::is_enum_v<T>) {
    auto value = enum_field<T>(object, key, enumerators(T{}));
    if (!value) return value.takeError();
    out = *value;
  } else if constexpr (std::is_same_v<T, bool>) {
    out = object.getBoolean(key).getValueOr(false);
  } else if constexpr (std::is_floating_point_v<T>) {
    auto value = number_field(object, key);
    if (!value) return value.takeError();
    out = T(*value);
  } else {
    auto value = integer_field(object, key);
    if (!value) return value.takeError();
    out = T(*value);
  }
  return llvm::Error::success();
}

// Every field of a Problem or a KernelConfig (their tables' order); the
// first that `object` lacks or holds malformed is the error.
template <typename Struct>
llvm::Error read_fields(const llvm::json::Object &object, Struct &out) {
  llvm::Error first = llvm::Error::success();
  auto read = [&](const auto &field) {
    if (first) return;
    first = read_field(object, field.name, out.*field.member);
  };
  if constexpr (std::is_same_v<Struct, Problem>)
    for_each_problem_field(read);
  else
    for_each_kernel_config_field(read);
  return first;
}

llvm::json::Object config_to_json(const KernelConfig &config) {
  llvm::json::Object out;
  for_each_kernel_config_field(
      [&](const auto &field) { out[field.name] = field_json(config.*field.member); });
  return out;
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
  return enum_field<Pass>(object, key, {Pass::forward, Pass::backward});
}

llvm::Expected<const llvm::json::Object &> object_field(const llvm::json::Object &object,
                                                        llvm::StringRef key) {
  if (const llvm::json::Object *value = object.getObject(key)) return *value;
  return error("worker request: '" + key + "': expected an object");
}

llvm::json::Object problem_to_json(const Problem &problem) {
  llvm::json::Object out;
  for_each_problem_field(
      [&](const auto &field) { out[field.name] = field_json(problem.*field.member); });
  return out;
}

llvm::Expected<Problem> problem_from_json(const llvm::json::Object &object) {
  Problem problem;
  if (llvm::Error e = read_fields(object, problem)) return e;
  return problem;
}

llvm::json::Object packed_batch_to_json(const PackedBatch &batch) {
  llvm::json::Array q, k;
  for (int64_t n : batch.seqlens_q) q.push_back(n);
  for (int64_t n : batch.seqlens_k) k.push_back(n);
  return llvm::json::Object{{"seqlens_q", std::move(q)}, {"seqlens_k", std::move(k)}};
}

namespace {

llvm::Error read_lengths(const llvm::json::Object &object, llvm::StringRef key,
                         std::vector<int64_t> &out) {
  const llvm::json::Array *list = object.getArray(key);
  if (!list) return error("worker request: '" + key + "': expected a list of lengths");
  for (size_t i = 0; i < list->size(); ++i) {
    const auto n = (*list)[i].getAsInteger();
    if (!n || *n < 0)
      return error(llvm::formatv("worker request: '{0}'[{1}]: expected a length (an integer >= 0)",
                                 key, i));
    out.push_back(*n);
  }
  return llvm::Error::success();
}

}  // namespace

llvm::Expected<PackedBatch> packed_batch_from_json(const llvm::json::Object &object) {
  PackedBatch batch;
  if (llvm::Error e = read_lengths(object, "seqlens_q", batch.seqlens_q)) return e;
  if (llvm::Error e = read_lengths(object, "seqlens_k", batch.seqlens_k)) return e;
  if (batch.seqlens_q.size() != batch.seqlens_k.size())
    return error(llvm::formatv("worker request: 'packed': {0} query lengths but {1} key lengths",
                               batch.seqlens_q.size(), batch.seqlens_k.size()));
  return batch;
}

llvm::json::Object modifiers_to_json(const Modifiers &m) {
  llvm::json::Array aux;
  for (const AuxField &field : m.aux) aux.push_back(llvm::json::Array{field.type, field.name});
  llvm::json::Object o{{"score_mod", m.score_mod},
                       {"score_mod_grad", m.score_mod_grad},
                       {"mask_mod", m.mask_mod},
                       {"sinks", m.sinks},
                       {"aux", std::move(aux)}};
  // true or false where decided; absent where left to the probe.
  if (m.mask_mod_qk_only != MaskModQkOnly::automatic)
    o["mask_mod_qk_only"] = m.mask_mod_qk_only == MaskModQkOnly::on;
  return o;
}

llvm::Expected<Modifiers> modifiers_from_json(const llvm::json::Object &o) {
  Modifiers m;
  for (auto [key, text] : {std::pair{"score_mod", &m.score_mod},
                           std::pair{"score_mod_grad", &m.score_mod_grad},
                           std::pair{"mask_mod", &m.mask_mod}}) {
    auto value = string_field(o, key);
    if (!value) return value.takeError();
    *text = *value;
  }
  for (const char *key : {"mask_mod_qk_only", "sinks"}) {
    auto value = o.getBoolean(key);
    const bool qk_only = llvm::StringRef(key) == "mask_mod_qk_only";
    if (!value && qk_only && !o.get(key)) continue;  // left to the probe
    if (!value)
      return error(llvm::formatv("worker request: 'modifiers.{0}': expected true or false", key));
    if (qk_only)
      m.mask_mod_qk_only = *value ? MaskModQkOnly::on : MaskModQkOnly::off;
    else
      m.sinks = *value;
  }
  const llvm::json::Array *aux = o.getArray("aux");
  if (!aux) return error("worker request: 'modifiers.aux': expected a list of [type, name]");
  for (const llvm::json::Value &field : *aux) {
    const llvm::json::Array *pair = field.getAsArray();
    if (!pair || pair->size() != 2 || !(*pair)[0].getAsString() || !(*pair)[1].getAsString())
      return error("worker request: 'modifiers.aux': expected a list of [type, name]");
    m.aux.push_back({(*pair)[0].getAsString()->str(), (*pair)[1].getAsString()->str()});
  }
  if (llvm::Error e = validate_modifiers(m)) return e;
  return m;
}

llvm::json::Object spec_to_json(const KernelSpec &s) {
  llvm::json::Object out{
      {"pass", to_string(s.pass)},
      {"dtype", to_string(s.dtype)},
      {"out_dtype", to_string(s.out_dtype)},
      {"kv_dtype", to_string(s.kv_dtype)},
      {"head_dim_qk", s.head_dim_qk},
      {"head_dim_v", s.head_dim_v},
      {"mask", to_string(s.mask)},
      {"chunked", s.chunked},
      {"softcap", s.softcap},
      {"config", config_to_json(s.config)},
      // Derived from the config and the problem, which the worker does not
      // have: the kernel's packed heads and whether it splits the keys.
      {"pack_gqa", s.pack_gqa},
      {"split_kv", s.split_kv},
      // The problem's input layout, which the kernel is compiled for.
      {"seqused_k", s.seqused_k},
      {"page_size", s.page_size},
      {"varlen", s.varlen},
      {"v_in_k", s.v_in_k},
      {"arch", s.arch.name()}};
  if (!s.modifiers.empty()) out["modifiers"] = modifiers_to_json(s.modifiers);
  return out;
}

llvm::Expected<KernelSpec> spec_from_json(const llvm::json::Object &o) {
  KernelSpec s;
  auto pass = pass_field(o, "pass");
  if (!pass) return pass.takeError();
  s.pass = *pass;
  // Every field the kernel's source depends on: a worker compiles and times
  // exactly the parent's kernel (its id and its cubin key).
  if (llvm::Error e = read_field(o, "dtype", s.dtype)) return e;
  if (llvm::Error e = read_field(o, "out_dtype", s.out_dtype)) return e;
  if (llvm::Error e = read_field(o, "kv_dtype", s.kv_dtype)) return e;
  if (llvm::Error e = read_field(o, "mask", s.mask)) return e;
  auto dqk = integer_field(o, "head_dim_qk"), dv = integer_field(o, "head_dim_v");
  if (!dqk) return dqk.takeError();
  if (!dv) return dv.takeError();
  s.head_dim_qk = int(*dqk);
  s.head_dim_v = int(*dv);
  s.softcap = o.getBoolean("softcap").getValueOr(false);
  auto config = object_field(o, "config");
  if (!config) return config.takeError();
  if (llvm::Error e = read_fields(*config, s.config)) return e;
  auto packed_heads = integer_field(o, "pack_gqa");
  if (!packed_heads) return packed_heads.takeError();
  s.pack_gqa = int(*packed_heads);
  if (auto split = o.getBoolean("split_kv"))
    s.split_kv = *split;
  else
    return error("worker request: 'split_kv': expected true or false");
  for (auto [key, flag] : {std::pair{"seqused_k", &s.seqused_k}, std::pair{"varlen", &s.varlen},
                           std::pair{"chunked", &s.chunked}, std::pair{"v_in_k", &s.v_in_k}}) {
    auto value = o.getBoolean(key);
    if (!value) return error(llvm::formatv("worker request: '{0}': expected true or false", key));
    *flag = *value;
  }
  auto page_size = integer_field(o, "page_size");
  if (!page_size) return page_size.takeError();
  s.page_size = int(*page_size);
  auto arch_text = string_field(o, "arch");
  if (!arch_text) return arch_text.takeError();
  auto arch = TargetArch::parse(*arch_text);
  if (!arch) return arch.takeError();
  s.arch = *arch;
  if (const llvm::json::Object *modifiers = o.getObject("modifiers")) {
    auto m = modifiers_from_json(*modifiers);
    if (!m) return m.takeError();
    s.modifiers = std::move(*m);
  } else if (o.get("modifiers")) {
    return error("worker request: 'modifiers': expected an object");
  }
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
  if (auto ns = reply.getInteger("compile_ns"); ns && *ns > 0)
    runtime_counters().compile_ns.fetch_add(uint64_t(*ns), std::memory_order_relaxed);
}

}  // namespace flashjit
