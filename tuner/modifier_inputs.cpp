#include "tuner/modifier_inputs.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <set>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

namespace {

llvm::Error usage_error(const std::string &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

bool is_pointer(const AuxField &field) { return llvm::StringRef(field.type).endswith("*"); }

// The generated array of a pointer field, as bytes of its element type.
std::vector<char> generated_array(const AuxField &field, size_t n, std::string &what) {
  std::vector<char> bytes;
  auto fill = [&](auto zero, auto value_of) {
    using T = decltype(zero);
    bytes.resize(n * sizeof(T));
    for (size_t i = 0; i < n; ++i) {
      const T x = value_of(i);
      std::copy_n(reinterpret_cast<const char *>(&x), sizeof(T), bytes.data() + i * sizeof(T));
    }
  };
  if (field.type == "const float*") {
    fill(0.f, [](size_t i) { return -float(i % 8 + 1) / 16.f; });
    what = "-((i % 8) + 1) / 16";
  } else if (field.type == "const int*") {
    fill(int32_t{0}, [](size_t i) { return int32_t(i / 97); });
    what = "i / 97";
  } else if (field.type == "const long long*") {
    fill(int64_t{0}, [](size_t i) { return int64_t(i / 97); });
    what = "i / 97";
  } else {  // const unsigned char*
    fill(uint8_t{0}, [](size_t i) { return uint8_t(i / 97 % 2); });
    what = "(i / 97) % 2";
  }
  return bytes;
}

}  // namespace

void ModifierInputs::attach(ForwardArgs &args) const {
  args.modifiers = &modifiers;
  if (aux && aux->size() > 0) {
    args.aux = aux->data();
    args.aux_bytes = aux->size();
  }
  if (modifiers.sinks) args.sinks = static_cast<const float *>(sinks.data());
}

void ModifierInputs::attach(BackwardArgs &args, float *dsinks) const {
  args.modifiers = &modifiers;
  if (aux && aux->size() > 0) {
    args.aux = aux->data();
    args.aux_bytes = aux->size();
  }
  if (modifiers.sinks) {
    args.sinks = static_cast<const float *>(sinks.data());
    args.dsinks = dsinks;
  }
}

ModifierArgs ModifierInputs::reference_args() const {
  ModifierArgs args;
  args.modifiers = &modifiers;
  if (aux) {
    args.aux = aux->data();
    args.aux_bytes = aux->size();
  }
  if (modifiers.sinks) args.sinks = static_cast<const float *>(sinks.data());
  return args;
}

llvm::Expected<ModifierInputs> parse_modifier_inputs(const Modifiers &modifiers,
                                                     llvm::ArrayRef<std::string> values,
                                                     llvm::StringRef given_as) {
  ModifierInputs in;
  in.modifiers = modifiers;
  in.aux.emplace(in.modifiers);
  if (!in.aux->error().empty()) return usage_error("--aux: " + in.aux->error());

  std::set<std::string> given;
  for (const std::string &value : values) {
    const auto [name_ref, text_ref] = llvm::StringRef(value).split('=');
    const std::string name = name_ref.trim().str();
    const llvm::StringRef text = text_ref.trim();
    if (name.empty() || text.empty() || !llvm::StringRef(value).contains('='))
      return usage_error(
          llvm::formatv("{0} {1}: expected NAME=VALUE, e.g. prefix=1024", given_as, value));
    auto field = std::find_if(modifiers.aux.begin(), modifiers.aux.end(),
                              [&](const AuxField &f) { return f.name == name; });
    if (field == modifiers.aux.end())
      return usage_error(llvm::formatv("{0} {1}: no aux field '{2}' (--aux declares the fields)",
                                       given_as, value, name));
    if (is_pointer(*field))
      return usage_error(llvm::formatv(
          "{0} {1}: '{2}' is a pointer ({3}): flashjit generates its values", given_as, value,
          name, field->type));
    if (!given.insert(name).second)
      return usage_error(llvm::formatv("{0}: '{1}' is given twice", given_as, name));
    std::string error;
    if (field->type == "float") {
      const std::string s = text.str();
      char *end = nullptr;
      const float x = std::strtof(s.c_str(), &end);
      if (end != s.c_str() + s.size())
        return usage_error(llvm::formatv("{0} {1}: '{2}' is a float: expected a number",
                                         given_as, value, name));
      error = in.aux->set(name, x);
    } else {
      long long x = 0;
      if (text.getAsInteger(10, x))
        return usage_error(llvm::formatv("{0} {1}: '{2}' is {3}: expected an integer", given_as,
                                         value, name, field->type));
      error = in.aux->set(name, x);
    }
    if (!error.empty()) return usage_error(llvm::formatv("{0} {1}: {2}", given_as, value, error));
    in.lines.push_back(llvm::formatv("{0} = {1}", name, text));
  }

  for (const AuxField &field : modifiers.aux)
    if (!is_pointer(field) && !given.count(field.name))
      return usage_error(llvm::formatv("the aux field '{0}' ({1}) needs a value: give "
                                       "{2} {0}=VALUE",
                                       field.name, field.type, given_as));
  return in;
}

llvm::Error upload_modifier_inputs(const Problem &p, ModifierInputs &in) {
  const Modifiers &modifiers = in.modifiers;
  const int64_t longest = std::max(p.seqlen_q, p.seqlen_k);
  const size_t n = size_t(std::max<int64_t>(p.batch, p.heads_q)) * size_t(2 * longest + 1);
  for (const AuxField &field : modifiers.aux) {
    if (!is_pointer(field)) continue;
    std::string what;
    const std::vector<char> bytes = generated_array(field, n, what);
    auto array = DeviceBuffer::from_host(bytes.data(), bytes.size());
    if (!array) return array.takeError();
    if (std::string e = in.aux->set(field.name, array->data()); !e.empty())
      return llvm::createStringError(llvm::inconvertibleErrorCode(), e);
    in.lines.push_back(llvm::formatv("{0}: {1} generated values {2}", field.name, n, what));
    in.arrays.push_back(std::move(*array));
  }
  if (modifiers.sinks) {
    std::vector<float> sinks(size_t(p.heads_q));
    for (size_t h = 0; h < sinks.size(); ++h) sinks[h] = float(int(h % 5) - 2) * 0.7f;
    auto device = DeviceBuffer::from_host(sinks.data(), sinks.size() * sizeof(float));
    if (!device) return device.takeError();
    in.sinks = std::move(*device);
    in.lines.push_back(llvm::formatv("sinks: {0} generated logits ((h % 5) - 2) * 0.7", p.heads_q));
  }
  return llvm::Error::success();
}

llvm::Expected<std::unique_ptr<ModifierInputs>> make_modifier_inputs(const Problem &p,
                                                                   const TunedModifiers &tuned,
                                                                   llvm::StringRef given_as) {
  if (tuned.modifiers.empty()) {
    if (!tuned.aux_values.empty())
      return usage_error(llvm::formatv("{0}: given without --aux fields to set", given_as));
    return nullptr;
  }
  auto parsed = parse_modifier_inputs(tuned.modifiers, tuned.aux_values, given_as);
  if (!parsed) return parsed.takeError();
  auto inputs = std::make_unique<ModifierInputs>(std::move(*parsed));
  if (llvm::Error e = upload_modifier_inputs(p, *inputs)) return e;
  return inputs;
}

}  // namespace flashjit
