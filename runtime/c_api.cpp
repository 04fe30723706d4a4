// The C API (include/flashjit/flashjit.h): plain structs in, an int out, the
// message in a thread-local string. Nothing may unwind across this boundary,
// so every entry point catches everything (bad_alloc is the only candidate).
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashjit/backward.h"
#include "flashjit/flashjit.h"
#include "flashjit/forward.h"
#include "flashjit/kernel_config_fields.h"
#include "flashjit/mods.h"
#include "flashjit/problem_fields.h"
#include "generator/modifier_source.h"
#include "llvm/Support/FormatVariadic.h"
#include "runtime/device.h"
#include "runtime/kernel_source.h"
#include "runtime/modifier_facts.h"
#include "runtime/nvrtc_compiler.h"
#include "runtime/runtime_counters.h"

namespace {

thread_local std::string g_last_error;

// The most CTAs one work tile's key range may be split over (flashjit.h).
constexpr int32_t kMaxSplits = 256;

int fail(std::string message) {
  g_last_error = std::move(message);
  return 1;
}

// One C field into its C++ twin (the tables in flashjit/problem_fields.h
// and flashjit/kernel_config_fields.h). Enum values were range-checked
// before; the C enums are numbered apart from the C++ ones.
void from_c(int32_t c, flashjit::DType &out) {
  out = c == FLASHJIT_BF16   ? flashjit::DType::bf16
        : c == FLASHJIT_FP16 ? flashjit::DType::fp16
                             : flashjit::DType::e4m3;
}
void from_c(int32_t c, flashjit::KvDType &out) {
  out = c == FLASHJIT_KV_E4M3 ? flashjit::KvDType::e4m3 : flashjit::KvDType::same;
}
void from_c(int32_t c, flashjit::OutDType &out) {
  out = c == FLASHJIT_OUT_BF16   ? flashjit::OutDType::bf16
        : c == FLASHJIT_OUT_FP16 ? flashjit::OutDType::fp16
                                 : flashjit::OutDType::automatic;
}
void from_c(int32_t c, flashjit::MaskKind &out) {
  out = c == FLASHJIT_MASK_NONE     ? flashjit::MaskKind::none
        : c == FLASHJIT_MASK_CAUSAL ? flashjit::MaskKind::causal
                                    : flashjit::MaskKind::window;
}
void from_c(int32_t c, flashjit::KernelPath &out) {
  out = c == FLASHJIT_PATH_SM80   ? flashjit::KernelPath::sm80
        : c == FLASHJIT_PATH_SM90 ? flashjit::KernelPath::sm90
                                  : flashjit::KernelPath::automatic;
}
void from_c(int32_t c, flashjit::GqaPacking &out) {
  out = c == FLASHJIT_PACK_GQA_ON    ? flashjit::GqaPacking::on
        : c == FLASHJIT_PACK_GQA_OFF ? flashjit::GqaPacking::off
                                     : flashjit::GqaPacking::automatic;
}
void from_c(int32_t c, bool &out) { out = c != 0; }
template <typename C, typename T>
  requires std::is_arithmetic_v<T> && (!std::is_same_v<T, bool>)
void from_c(C c, T &out) {
  static_assert(sizeof(C) == sizeof(T), "a C field converts to a C++ field of its width");
  out = c;
}

int32_t to_c(flashjit::MaskModQkOnly qk_only) {
  return qk_only == flashjit::MaskModQkOnly::on    ? FLASHJIT_MASK_MOD_QK_ONLY_ON
         : qk_only == flashjit::MaskModQkOnly::off ? FLASHJIT_MASK_MOD_QK_ONLY_OFF
                                                   : FLASHJIT_MASK_MOD_QK_ONLY_AUTO;
}

flashjit::TensorStrides strides(int64_t batch, int64_t seq, int64_t head) {
  flashjit::TensorStrides s;
  s.batch = batch;
  s.seq = seq;
  s.head = head;
  return s;
}

// Enum fields arrive as raw integers from FFI; an out-of-range value would
// otherwise become an enumerator no switch handles. Returns "" or the error.
std::string convert_problem(const char *fn, const flashjit_problem &p, flashjit::Problem &out) {
  if (p.dtype < FLASHJIT_BF16 || p.dtype > FLASHJIT_E4M3)
    return llvm::formatv("{0}: problem.dtype={1} is invalid: expected FLASHJIT_BF16 (0), "
                         "FLASHJIT_FP16 (1) or FLASHJIT_E4M3 (2)",
                         fn, p.dtype);
  if (p.kv_dtype < FLASHJIT_KV_SAME || p.kv_dtype > FLASHJIT_KV_E4M3)
    return llvm::formatv("{0}: problem.kv_dtype={1} is invalid: expected FLASHJIT_KV_SAME (0) "
                         "or FLASHJIT_KV_E4M3 (1)",
                         fn, p.kv_dtype);
  if (p.out_dtype < FLASHJIT_OUT_AUTO || p.out_dtype > FLASHJIT_OUT_FP16)
    return llvm::formatv("{0}: problem.out_dtype={1} is invalid: expected FLASHJIT_OUT_AUTO (0), "
                         "FLASHJIT_OUT_BF16 (1) or FLASHJIT_OUT_FP16 (2)",
                         fn, p.out_dtype);
  if (p.mask < FLASHJIT_MASK_NONE || p.mask > FLASHJIT_MASK_WINDOW)
    return llvm::formatv("{0}: problem.mask={1} is invalid: expected FLASHJIT_MASK_NONE (0), "
                         "FLASHJIT_MASK_CAUSAL (1) or FLASHJIT_MASK_WINDOW (2)",
                         fn, p.mask);
  if (p.attention_chunk < 0)
    return llvm::formatv("{0}: problem.attention_chunk={1} is invalid: expected 0 (off) or a "
                         "chunk length > 0",
                         fn, p.attention_chunk);
  flashjit::for_each_problem_field(
      [&](const auto &field) { from_c(p.*field.c_member, out.*field.member); });
  return "";
}

std::string convert_config(const char *fn, const flashjit_config *c,
                           flashjit::ForwardOptions &out) {
  if (!c) return "";
  if (c->path < FLASHJIT_PATH_AUTO || c->path > FLASHJIT_PATH_SM90)
    return llvm::formatv("{0}: config.path={1} is invalid: expected FLASHJIT_PATH_AUTO (0), "
                         "FLASHJIT_PATH_SM80 (1) or FLASHJIT_PATH_SM90 (2)",
                         fn, c->path);
  for (auto [name, value] : {std::pair{"block_m", c->block_m}, {"block_n", c->block_n},
                             {"warps", c->warps}, {"stages", c->stages}})
    if (value < 0)
      return llvm::formatv("{0}: config.{1}={2} is invalid: expected a positive value, or 0 "
                           "to let the heuristic choose",
                           fn, name, value);
  if (c->splits < 0 || c->splits > kMaxSplits)
    return llvm::formatv("{0}: config.splits={1} is invalid: expected 0 (the heuristic "
                         "chooses), 1 (off) or up to {2} splits of the key range",
                         fn, c->splits, kMaxSplits);
  if (c->pack_gqa < FLASHJIT_PACK_GQA_AUTO || c->pack_gqa > FLASHJIT_PACK_GQA_OFF)
    return llvm::formatv("{0}: config.pack_gqa={1} is invalid: expected FLASHJIT_PACK_GQA_AUTO "
                         "(0), FLASHJIT_PACK_GQA_ON (1) or FLASHJIT_PACK_GQA_OFF (2)",
                         fn, c->pack_gqa);
  out.use_config = true;
  flashjit::for_each_kernel_config_field(
      [&](const auto &field) { from_c(c->*field.c_member, out.config.*field.member); });
  return "";
}

// A flashjit_modifiers' sources, flag and aux declarations into `out`; ""
// or why not.
std::string convert_modifier_sources(const char *fn, const flashjit_modifiers &m,
                                     flashjit::Modifiers &out) {
  if (m.score_mod) out.score_mod = m.score_mod;
  if (m.mask_mod) out.mask_mod = m.mask_mod;
  if (m.score_mod_grad) out.score_mod_grad = m.score_mod_grad;
  if (m.mask_mod_qk_only < FLASHJIT_MASK_MOD_QK_ONLY_AUTO ||
      m.mask_mod_qk_only > FLASHJIT_MASK_MOD_QK_ONLY_OFF)
    return llvm::formatv(
               "{0}: mask_mod_qk_only is {1}: expected FLASHJIT_MASK_MOD_QK_ONLY_AUTO "
               "(0), FLASHJIT_MASK_MOD_QK_ONLY_ON (1) or FLASHJIT_MASK_MOD_QK_ONLY_OFF "
               "(2)",
               fn, m.mask_mod_qk_only)
        .str();
  out.mask_mod_qk_only =
      m.mask_mod_qk_only == FLASHJIT_MASK_MOD_QK_ONLY_ON    ? flashjit::MaskModQkOnly::on
      : m.mask_mod_qk_only == FLASHJIT_MASK_MOD_QK_ONLY_OFF ? flashjit::MaskModQkOnly::off
                                                            : flashjit::MaskModQkOnly::automatic;
  if (m.aux) {
    auto fields = flashjit::parse_aux_declarations(m.aux);
    if (!fields) return std::string(fn) + ": " + llvm::toString(fields.takeError());
    out.aux = std::move(*fields);
  }
  return "";
}

// A flashjit_modifiers into `out` and its aux values into `aux` (created
// here: it needs the fields); "" or why not.
std::string convert_modifiers(const char *fn, const flashjit_modifiers &m, flashjit::Modifiers &out,
                              std::optional<flashjit::AuxValues> &aux) {
  if (std::string e = convert_modifier_sources(fn, m, out); !e.empty()) return e;
  aux.emplace(out);
  if (!aux->error().empty()) return std::string(fn) + ": " + aux->error();
  if (m.aux_count != static_cast<int64_t>(out.aux.size()) || (m.aux_count > 0 && !m.aux_values))
    return llvm::formatv("{0}: {1} aux values given, {2} fields declared: give one per field", fn,
                         m.aux_count, out.aux.size())
        .str();
  for (int64_t i = 0; i < m.aux_count; ++i) {
    const flashjit_aux_value &v = m.aux_values[i];
    const std::string name = v.name ? v.name : "";
    std::string e;
    switch (v.kind) {
      case FLASHJIT_AUX_POINTER:
        e = aux->set(name, v.pointer);
        break;
      case FLASHJIT_AUX_INTEGER:
        e = aux->set(name, static_cast<long long>(v.integer));
        break;
      case FLASHJIT_AUX_REAL:
        e = aux->set(name, static_cast<float>(v.real));
        break;
      default:
        e = llvm::formatv("aux value '{0}' has kind {1}: expected 0, 1 or 2", name, v.kind);
    }
    if (!e.empty()) return std::string(fn) + ": " + e;
  }
  return "";
}

flashjit::BlockMask to_block_mask(const flashjit_block_mask &m) {
  flashjit::BlockMask out;
  out.block_q = m.block_q;
  out.block_k = m.block_k;
  out.batches = m.batches;
  out.heads = m.heads;
  out.q_blocks = m.q_blocks;
  out.k_blocks = m.k_blocks;
  out.kv_num_blocks = m.kv_num_blocks;
  out.kv_indices = m.kv_indices;
  out.full_kv_num_blocks = m.full_kv_num_blocks;
  out.full_kv_indices = m.full_kv_indices;
  return out;
}

// `mods` (or none) converted into `modifiers` and `aux`, and pointed to by
// the call's arguments (ForwardArgs or BackwardArgs); "" or why not.
// `block_mask` holds the call's block mask when mods->block_mask is set.
template <class Args>
std::string attach_modifiers(const char *fn, const flashjit_modifiers *mods,
                             flashjit::Modifiers &modifiers,
                             std::optional<flashjit::AuxValues> &aux,
                             flashjit::BlockMask &block_mask, Args &args) {
  if (!mods) return "";
  if (const flashjit_block_mask *m = mods->block_mask) {
    block_mask = to_block_mask(*m);
    args.block_mask = &block_mask;
  }
  if (std::string e = convert_modifiers(fn, *mods, modifiers, aux); !e.empty()) return e;
  args.modifiers = &modifiers;
  constexpr bool kBackward = requires { args.dsinks; };
  if (mods->sinks) {
    modifiers.sinks = true;
    args.sinks = mods->sinks;
    if constexpr (kBackward) {
      if (!mods->dsinks)
        return std::string(fn) + ": modifiers.sinks is set but modifiers.dsinks is NULL: the "
                                 "backward writes the sinks' gradient there (heads_q floats)";
      args.dsinks = mods->dsinks;
    }
  } else if (kBackward && mods->dsinks) {
    return std::string(fn) + ": modifiers.dsinks is set without modifiers.sinks: give the "
                             "forward's sinks too, or neither";
  }
  if (aux->size() > 0) {
    args.aux = aux->data();
    args.aux_bytes = aux->size();
  }
  return "";
}

int forward_impl(const char *fn, const flashjit_problem *p, const flashjit_forward_args *a,
                 const flashjit_kvcache_args *kv, const flashjit_varlen_args *vl, void *stream,
                 const flashjit_config *c, const flashjit_modifiers *mods = nullptr) {
  if (!p) return fail(std::string(fn) + ": problem is NULL");
  if (!a) return fail(std::string(fn) + ": args is NULL");
  flashjit::Problem problem;
  flashjit::ForwardOptions options;
  if (std::string e = convert_problem(fn, *p, problem); !e.empty()) return fail(e);
  if (std::string e = convert_config(fn, c, options); !e.empty()) return fail(e);

  flashjit::ForwardArgs args;
  args.q = a->q;
  args.k = a->k;
  args.v = a->v;
  args.o = a->o;
  args.lse = a->lse;
  args.q_strides = strides(a->q_stride_batch, a->q_stride_seq, a->q_stride_head);
  args.k_strides = strides(a->k_stride_batch, a->k_stride_seq, a->k_stride_head);
  args.v_strides = strides(a->v_stride_batch, a->v_stride_seq, a->v_stride_head);
  args.o_strides = strides(a->o_stride_batch, a->o_stride_seq, a->o_stride_head);
  args.descale.q = a->q_descale;
  args.descale.k = a->k_descale;
  args.descale.v = a->v_descale;
  args.descale.batch_stride = a->descale_stride_batch;
  args.descale.head_stride = a->descale_stride_head;
  if (kv) {
    args.cache.cache_seqlens = kv->cache_seqlens;
    args.cache.page_table = kv->page_table;
    args.cache.page_table_stride = kv->page_table_stride;
    args.cache.num_pages = kv->num_pages;
    args.cache.k_new = kv->k_new;
    args.cache.v_new = kv->v_new;
    args.cache.seqlen_new = kv->seqlen_new;
    args.cache.k_new_strides =
        strides(kv->k_new_stride_batch, kv->k_new_stride_seq, kv->k_new_stride_head);
    args.cache.v_new_strides =
        strides(kv->v_new_stride_batch, kv->v_new_stride_seq, kv->v_new_stride_head);
    args.cache.cache_batch_idx = kv->cache_batch_idx;
    args.cache.cache_batches = kv->num_cache_batches;
    args.cache.cache_leftpad = kv->cache_leftpad;
    args.cache.cu_seqlens_k_new = kv->cu_seqlens_k_new;
  }

  if (vl) {
    args.varlen.cu_seqlens_q = vl->cu_seqlens_q;
    args.varlen.seqused_q = vl->seqused_q;
    args.varlen.seqused_k = vl->seqused_k;
    args.varlen.cu_seqlens_k = vl->cu_seqlens_k;
    args.varlen.total_q = vl->total_q;
    args.varlen.total_k = vl->total_k;
  }
  flashjit::Modifiers modifiers;
  std::optional<flashjit::AuxValues> aux;
  flashjit::BlockMask block_mask;
  if (std::string e = attach_modifiers(fn, mods, modifiers, aux, block_mask, args); !e.empty())
    return fail(e);

  flashjit::Status status =
      flashjit::forward(problem, args, static_cast<CUstream_st *>(stream), options);
  if (!status.ok()) return fail(status.message());
  g_last_error.clear();
  return 0;
}

int backward_impl(const char *fn, const flashjit_problem *p, const flashjit_backward_args *a,
                  const flashjit_varlen_args *vl, void *stream, const flashjit_config *c,
                  const flashjit_modifiers *mods = nullptr) {
  if (!p) return fail(std::string(fn) + ": problem is NULL");
  if (!a) return fail(std::string(fn) + ": args is NULL");
  flashjit::Problem problem;
  flashjit::ForwardOptions options;
  if (std::string e = convert_problem(fn, *p, problem); !e.empty()) return fail(e);
  if (std::string e = convert_config(fn, c, options); !e.empty()) return fail(e);

  flashjit::BackwardArgs args;
  args.q = a->q;
  args.k = a->k;
  args.v = a->v;
  args.o = a->o;
  args.dout = a->dout;
  args.lse = a->lse;
  args.dq = a->dq;
  args.dk = a->dk;
  args.dv = a->dv;
  args.q_strides = strides(a->q_stride_batch, a->q_stride_seq, a->q_stride_head);
  args.k_strides = strides(a->k_stride_batch, a->k_stride_seq, a->k_stride_head);
  args.v_strides = strides(a->v_stride_batch, a->v_stride_seq, a->v_stride_head);
  args.o_strides = strides(a->o_stride_batch, a->o_stride_seq, a->o_stride_head);
  args.dout_strides = strides(a->do_stride_batch, a->do_stride_seq, a->do_stride_head);
  args.dq_strides = strides(a->dq_stride_batch, a->dq_stride_seq, a->dq_stride_head);
  args.dk_strides = strides(a->dk_stride_batch, a->dk_stride_seq, a->dk_stride_head);
  args.dv_strides = strides(a->dv_stride_batch, a->dv_stride_seq, a->dv_stride_head);
  args.workspace = a->workspace;
  args.workspace_bytes = static_cast<size_t>(a->workspace_bytes);
  if (vl) {
    args.varlen.cu_seqlens_q = vl->cu_seqlens_q;
    args.varlen.seqused_q = vl->seqused_q;
    args.varlen.seqused_k = vl->seqused_k;
    args.varlen.cu_seqlens_k = vl->cu_seqlens_k;
    args.varlen.total_q = vl->total_q;
    args.varlen.total_k = vl->total_k;
  }
  flashjit::Modifiers modifiers;
  std::optional<flashjit::AuxValues> aux;
  flashjit::BlockMask block_mask;
  if (std::string e = attach_modifiers(fn, mods, modifiers, aux, block_mask, args); !e.empty())
    return fail(e);

  flashjit::Status status =
      flashjit::backward(problem, args, static_cast<CUstream_st *>(stream), options);
  if (!status.ok()) return fail(status.message());
  g_last_error.clear();
  return 0;
}

// A shipped modifier (include/flashjit/mods.h) with its aux declarations as
// the C API spells them; built once, alive for the process (the strings
// flashjit_shipped_modifiers hands out point into it).
struct ShippedModifiers {
  std::string name;
  flashjit::Modifiers modifiers;
  std::string aux_declarations;
};

const std::vector<ShippedModifiers> &shipped_table() {
  static const std::vector<ShippedModifiers> table = [] {
    namespace mods = flashjit::mods;
    const std::pair<const char *, flashjit::Modifiers> entries[] = {
        {"alibi", mods::alibi()},
        {"relative_bias", mods::relative_bias()},
        {"document_mask", mods::document_mask()},
        {"prefix_lm", mods::prefix_lm()},
        {"sliding_window_with_sinks", mods::sliding_window_with_sinks()},
        {"causal_mask", mods::causal_mask()},
    };
    std::vector<ShippedModifiers> out;
    for (const auto &[name, m] : entries) {
      std::string decls;
      for (const flashjit::AuxField &f : m.aux)
        decls += (decls.empty() ? "" : ", ") + f.type + " " + f.name;
      out.push_back({name, m, decls});
    }
    return out;
  }();
  return table;
}

const ShippedModifiers *shipped_modifiers(llvm::StringRef name) {
  for (const ShippedModifiers &s : shipped_table())
    if (s.name == name) return &s;
  return nullptr;
}

std::string shipped_modifier_names() {
  std::string names;
  for (const ShippedModifiers &s : shipped_table()) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

template <typename Fn>
int guarded(const char *fn, Fn &&body) {
  try {
    return body();
  } catch (const std::exception &e) {
    return fail(std::string(fn) + ": internal error: " + e.what());
  } catch (...) {
    return fail(std::string(fn) + ": internal error (unknown exception)");
  }
}

}  // namespace

extern "C" {

int flashjit_forward(const flashjit_problem *problem, const flashjit_forward_args *args,
                     void *stream, const flashjit_config *config) {
  return guarded("flashjit_forward", [&] {
    return forward_impl("flashjit_forward", problem, args, nullptr, nullptr, stream, config);
  });
}

int flashjit_create_block_mask(const flashjit_problem *problem,
                               const flashjit_modifiers *modifiers,
                               const flashjit_block_mask *out, void *stream) {
  constexpr const char *fn = "flashjit_create_block_mask";
  return guarded(fn, [&] {
    if (!problem) return fail(std::string(fn) + ": problem is NULL");
    if (!modifiers) return fail(std::string(fn) + ": modifiers is NULL: the mask_mod is built");
    if (!out) return fail(std::string(fn) + ": out is NULL: it describes the arrays to fill");
    if (modifiers->block_mask)
      return fail(std::string(fn) + ": modifiers->block_mask is set: it is what this builds, "
                                    "give it as out");
    flashjit::Problem p;
    if (std::string e = convert_problem(fn, *problem, p); !e.empty()) return fail(e);
    flashjit::Modifiers converted;
    std::optional<flashjit::AuxValues> aux;
    flashjit::BlockMask unused;
    flashjit::ForwardArgs args;  // carries the aux values' bytes
    if (std::string e = attach_modifiers(fn, modifiers, converted, aux, unused, args); !e.empty())
      return fail(e);
    const flashjit::Status status =
        flashjit::create_block_mask(p, converted, args.aux, args.aux_bytes, to_block_mask(*out),
                                    static_cast<CUstream_st *>(stream));
    if (!status.ok()) return fail(std::string(fn) + ": " + status.message());
    return 0;
  });
}

int flashjit_shipped_modifiers(const char *name, flashjit_modifiers *out) {
  return guarded("flashjit_shipped_modifiers", [&] {
    if (!out) return fail("flashjit_shipped_modifiers: out is NULL");
    const ShippedModifiers *found = name ? shipped_modifiers(name) : nullptr;
    if (!found)
      return fail(std::string("flashjit_shipped_modifiers: no shipped modifier '") +
                  (name ? name : "(null)") + "': expected one of " + shipped_modifier_names() +
                  (name && llvm::StringRef(name) == "tanh_softcap"
                       ? " (a tanh softcap is built in: set the problem's softcap)"
                       : ""));
    *out = flashjit_modifiers{};
    auto text = [](const std::string &s) { return s.empty() ? nullptr : s.c_str(); };
    out->score_mod = text(found->modifiers.score_mod);
    out->score_mod_grad = text(found->modifiers.score_mod_grad);
    out->mask_mod = text(found->modifiers.mask_mod);
    out->aux = text(found->aux_declarations);
    out->mask_mod_qk_only = to_c(found->modifiers.mask_mod_qk_only);
    g_last_error.clear();
    return 0;
  });
}

int flashjit_inspect_modifiers(const flashjit_modifiers *modifiers, const char *arch,
                               flashjit_modifier_facts *out) {
  constexpr const char *fn = "flashjit_inspect_modifiers";
  return guarded(fn, [&] {
    if (!modifiers) return fail(std::string(fn) + ": modifiers is NULL");
    if (!out) return fail(std::string(fn) + ": out is NULL");
    // Only the sources and declarations: no aux value is read.
    flashjit::Modifiers m;
    if (std::string e = convert_modifier_sources(fn, *modifiers, m); !e.empty()) return fail(e);
    if (llvm::Error e = flashjit::validate_modifiers(m))
      return fail(std::string(fn) + ": " + llvm::toString(std::move(e)));
    flashjit_modifier_facts facts{};
    auto defines = flashjit::score_mod_defines_grad(m, flashjit::process_tuning_db());
    if (!defines) return fail(std::string(fn) + ": " + llvm::toString(defines.takeError()));
    facts.score_mod_defines_grad = *defines ? 1 : 0;
    flashjit::MaskModQkOnly qk_only = m.mask_mod_qk_only;
    if (!m.mask_mod.empty()) {
      flashjit::TargetArch target;
      if (arch) {
        auto parsed = flashjit::TargetArch::parse(arch);
        if (!parsed)
          return fail(std::string(fn) + ": arch '" + arch +
                      "': " + llvm::toString(parsed.takeError()));
        target = *parsed;
      } else {
        auto context = flashjit::current_or_primary_context();
        if (!context) return fail(std::string(fn) + ": " + llvm::toString(context.takeError()));
        auto device = flashjit::cached_device_info(static_cast<int>(context->device));
        if (!device) return fail(std::string(fn) + ": " + llvm::toString(device.takeError()));
        target = device->target();
      }
      auto reads = flashjit::mask_mod_reads(m, target, flashjit::process_tuning_db());
      if (!reads) return fail(std::string(fn) + ": " + llvm::toString(reads.takeError()));
      facts.mask_mod_reads_b = reads->b ? 1 : 0;
      facts.mask_mod_reads_h = reads->h ? 1 : 0;
      if (qk_only == flashjit::MaskModQkOnly::automatic)
        qk_only = reads->qk_only() ? flashjit::MaskModQkOnly::on : flashjit::MaskModQkOnly::off;
    }
    facts.mask_mod_qk_only = qk_only == flashjit::MaskModQkOnly::on ? 1 : 0;
    *out = facts;
    g_last_error.clear();
    return 0;
  });
}

int flashjit_forward_modified(const flashjit_problem *problem, const flashjit_forward_args *args,
                              const flashjit_modifiers *modifiers, void *stream,
                              const flashjit_config *config) {
  return guarded("flashjit_forward_modified", [&] {
    return forward_impl("flashjit_forward_modified", problem, args, nullptr, nullptr, stream,
                        config, modifiers);
  });
}

int flashjit_forward_kvcache(const flashjit_problem *problem, const flashjit_forward_args *args,
                             const flashjit_kvcache_args *cache, void *stream,
                             const flashjit_config *config) {
  return guarded("flashjit_forward_kvcache", [&] {
    return forward_impl("flashjit_forward_kvcache", problem, args, cache, nullptr, stream,
                        config);
  });
}

int flashjit_forward_varlen(const flashjit_problem *problem, const flashjit_forward_args *args,
                            const flashjit_varlen_args *varlen, void *stream,
                            const flashjit_config *config) {
  return guarded("flashjit_forward_varlen", [&] {
    if (!varlen) return fail("flashjit_forward_varlen: varlen is NULL");
    return forward_impl("flashjit_forward_varlen", problem, args, nullptr, varlen, stream,
                        config);
  });
}

int flashjit_forward_varlen_kvcache(const flashjit_problem *problem,
                                    const flashjit_forward_args *args,
                                    const flashjit_varlen_args *varlen,
                                    const flashjit_kvcache_args *cache, void *stream,
                                    const flashjit_config *config) {
  return guarded("flashjit_forward_varlen_kvcache", [&] {
    if (!varlen) return fail("flashjit_forward_varlen_kvcache: varlen is NULL");
    if (!cache) return fail("flashjit_forward_varlen_kvcache: cache is NULL");
    return forward_impl("flashjit_forward_varlen_kvcache", problem, args, cache, varlen, stream,
                        config);
  });
}

int flashjit_backward(const flashjit_problem *problem, const flashjit_backward_args *args,
                      void *stream, const flashjit_config *config) {
  return guarded("flashjit_backward", [&] {
    return backward_impl("flashjit_backward", problem, args, nullptr, stream, config);
  });
}

int flashjit_backward_modified(const flashjit_problem *problem, const flashjit_backward_args *args,
                               const flashjit_modifiers *modifiers, void *stream,
                               const flashjit_config *config) {
  return guarded("flashjit_backward_modified", [&] {
    return backward_impl("flashjit_backward_modified", problem, args, nullptr, stream, config,
                         modifiers);
  });
}

int flashjit_backward_varlen(const flashjit_problem *problem, const flashjit_backward_args *args,
                             const flashjit_varlen_args *varlen, void *stream,
                             const flashjit_config *config) {
  return guarded("flashjit_backward_varlen", [&] {
    if (!varlen) return fail("flashjit_backward_varlen: varlen is NULL");
    return backward_impl("flashjit_backward_varlen", problem, args, varlen, stream, config);
  });
}

uint64_t flashjit_backward_workspace_bytes(const flashjit_problem *p) {
  return flashjit_backward_varlen_workspace_bytes(p, 0);
}

uint64_t flashjit_backward_varlen_workspace_bytes(const flashjit_problem *p, int64_t total_q) {
  flashjit::Problem problem;
  if (!p || !convert_problem("flashjit_backward_workspace_bytes", *p, problem).empty()) return 0;
  // Rows: [batch, heads_q, seqlen_q], or [heads_q, total_q] of a packed batch.
  const int64_t a = problem.varlen ? 1 : problem.batch;
  const int64_t b = problem.varlen ? total_q : problem.seqlen_q;
  if (a < 1 || problem.heads_q < 1 || b < 1 || problem.head_dim_qk < 1) return 0;
  // Past 64 bits it would wrap to a small size (and validation rejects it).
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(uint64_t(a), uint64_t(problem.heads_q), &bytes) ||
      __builtin_mul_overflow(bytes, uint64_t(b), &bytes) ||
      __builtin_mul_overflow(bytes, uint64_t(problem.head_dim_qk + 1) * 4, &bytes))
    return 0;
  return flashjit::backward_workspace_bytes(problem, total_q);
}

const char *flashjit_last_error(void) { return g_last_error.c_str(); }

const char *flashjit_version(void) { return FLASHJIT_VERSION; }

void flashjit_preload_compiler(void) { flashjit::preload_nvrtc(); }

uint64_t flashjit_compile_count(void) {
  return flashjit::runtime_counters().compiles.load(std::memory_order_relaxed);
}

uint64_t flashjit_runtime_stat(const char *name) {
  if (!name) return UINT64_MAX;
  const flashjit::RuntimeStats s = flashjit::runtime_stats();
  const llvm::StringRef n(name);
  for (auto [known, value] : {std::pair{"compiles", s.compiles},
                              {"module_loads", s.module_loads},
                              {"launches", s.launches},
                              {"compile_ns", s.compile_ns},
                              {"compiler_wait_ns", s.compiler_wait_ns},
                              {"database_ns", s.database_ns},
                              {"module_load_ns", s.module_load_ns}})
    if (n == known) return value;
  return UINT64_MAX;
}

}  // extern "C"
