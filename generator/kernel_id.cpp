#include "generator/kernel_id.h"

#include "generator/fwd_sm90_traits.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error id_error(llvm::StringRef id, const llvm::Twine &why) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 llvm::formatv("kernel id '{0}': {1}", id, why.str()).str());
}

bool parse_dtype(llvm::StringRef text, DType &out) {
  for (DType d : {DType::bf16, DType::fp16, DType::e4m3})
    if (text == to_string(d)) {
      out = d;
      return true;
    }
  return false;
}

// "<prefix><decimal in [1, 4096]>" into `out`. The bound is far above any
// tile, head dim, packing or page flashjit writes, and keeps an id from
// another source from reaching the generator's arithmetic with sizes it
// never sees.
bool parse_number(llvm::StringRef token, llvm::StringRef prefix, int &out) {
  return token.consume_front(prefix) && !token.getAsInteger(10, out) && out > 0 && out <= 4096;
}

}  // namespace

llvm::Expected<ParsedKernelId> parse_kernel_id(llvm::StringRef id) {
  llvm::SmallVector<llvm::StringRef, 24> fields;
  id.split(fields, '_');
  // pass path dtype hdqk hdv mask cap bm bn w s ... sm XY[a]
  if (fields.size() < 13) return id_error(id, "too few fields for a kernel id");
  ParsedKernelId out;
  KernelSpec &spec = out.spec;

  auto arch = TargetArch::parse(fields[fields.size() - 2].str() + "_" + fields.back().str());
  if (!arch) return id_error(id, llvm::toString(arch.takeError()));
  spec.arch = *arch;

  size_t i = 0;
  auto next = [&]() -> llvm::StringRef { return fields[i++]; };
  auto bad = [&](const char *what) {
    return id_error(id, llvm::formatv("'{0}' is not {1}", fields[i - 1], what));
  };
  if (llvm::StringRef pass = next(); pass == "fwd")
    spec.pass = Pass::forward;
  else if (pass == "bwd")
    spec.pass = Pass::backward;
  else
    return bad("a pass (fwd or bwd)");
  if (llvm::StringRef path = next(); path == "sm80")
    spec.config.path = KernelPath::sm80;
  else if (path == "sm90")
    spec.config.path = KernelPath::sm90;
  else
    return bad("a kernel path (sm80 or sm90)");
  if (!parse_dtype(next(), spec.dtype)) return bad("a dtype");
  spec.kv_dtype = spec.out_dtype = spec.dtype;
  if (!parse_number(next(), "hdqk", spec.head_dim_qk)) return bad("hdqk<N>");
  if (!parse_number(next(), "hdv", spec.head_dim_v)) return bad("hdv<N>");
  if (llvm::StringRef mask = next(); mask == "none")
    spec.mask = MaskKind::none;
  else if (mask == "causal")
    spec.mask = MaskKind::causal;
  else if (mask == "window")
    spec.mask = MaskKind::window;
  else
    return bad("a mask (none, causal or window)");
  if (llvm::StringRef cap = next(); cap == "softcap" || cap == "nocap")
    spec.softcap = cap == "softcap";
  else
    return bad("softcap or nocap");
  if (!parse_number(next(), "bm", spec.config.block_m)) return bad("bm<N>");
  if (!parse_number(next(), "bn", spec.config.block_n)) return bad("bn<N>");
  if (!parse_number(next(), "w", spec.config.warps)) return bad("w<N>");
  if (!parse_number(next(), "s", spec.config.stages)) return bad("s<N>");

  // The optional fields, in id()'s order; what is left before the arch
  // must be one of them, or the id is not one id() writes (checked below).
  const size_t arch_at = fields.size() - 2;
  while (i < arch_at) {
    llvm::StringRef field = next();
    DType dtype;
    if (field == "det") {
      spec.config.deterministic = true;
    } else if (field.startswith("kv") && parse_dtype(field.drop_front(2), dtype)) {
      spec.kv_dtype = dtype;
    } else if (field.startswith("o") && parse_dtype(field.drop_front(1), dtype)) {
      spec.out_dtype = dtype;
    } else if (field.startswith("gqa")) {
      if (!parse_number(field, "gqa", spec.pack_gqa)) return bad("gqa<N>");
    } else if (field == "split") {
      spec.split_kv = true;
    } else if (field == "seqused") {
      spec.seqused_k = true;
    } else if (field.startswith("page")) {
      if (!parse_number(field, "page", spec.page_size)) return bad("page<N>");
    } else if (field == "varlen") {
      spec.varlen = true;
    } else if (field == "chunk") {
      spec.chunked = true;
    } else if (field == "vink") {
      spec.v_in_k = true;
    } else if (field.startswith("mod")) {
      llvm::StringRef hash = field.drop_front(3);
      if (hash.size() != 16 || !llvm::all_of(hash, [](char c) {
            return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
          }))
        return bad("mod<16 hex digits>");
      out.modifiers_hash = hash.str();
    } else {
      return bad("a field of a kernel id");
    }
  }
  // The counts are launch parameters: the kernel knows only whether it
  // splits and how many heads a tile packs.
  spec.config.splits = spec.split_kv ? 2 : 1;
  spec.config.pack_gqa = spec.pack_gqa > 1 ? GqaPacking::on : GqaPacking::off;

  if (spec.v_in_k && !(spec.pass == Pass::forward && spec.config.path == KernelPath::sm90 &&
                       sm90_forward_v_in_k_fits(spec.head_dim_qk, spec.head_dim_v,
                                                spec.kv_dtype == DType::e4m3 ? 1 : 2)))
    return id_error(id, "vink: V is read from K's tiles only by the 16-bit sm90 forward, with "
                        "V's tiled columns within K's");
  // Exactly the string id() writes: no other order, spelling or repeat.
  std::string written = spec.id();
  if (!out.modifiers_hash.empty())
    written.insert(written.size() - spec.arch.name().size() - 1, "_mod" + out.modifiers_hash);
  if (written != id)
    return id_error(id, llvm::formatv("not as flashjit writes it ('{0}')", written));
  return out;
}

}  // namespace flashjit
