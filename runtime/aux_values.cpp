// AuxValues (include/flashjit/modifiers.h): a Modifiers' aux fields packed
// by name into the struct the generator declares (generator/modifier_source.h).
#include <cstring>

#include "flashjit/modifiers.h"
#include "generator/modifier_source.h"

namespace flashjit {

AuxValues::AuxValues(const Modifiers &modifiers) {
  auto layout = aux_layout(modifiers);
  if (!layout) {
    error_ = llvm::toString(layout.takeError());
    return;
  }
  for (size_t i = 0; i < layout->size(); ++i)
    slots_.push_back({modifiers.aux[i].name, modifiers.aux[i].type, (*layout)[i].offset});
  size_ = static_cast<size_t>(aux_struct_bytes(*layout));
}

namespace {
// The kinds of value each field type takes.
enum class Kind { pointer, integer, real };
Kind kind_of(const std::string &type) {
  if (!type.empty() && type.back() == '*') return Kind::pointer;
  return type == "float" ? Kind::real : Kind::integer;
}
const char *kind_name(Kind kind) {
  return kind == Kind::pointer ? "a pointer" : kind == Kind::real ? "a float" : "an integer";
}
}  // namespace

// The field `name` if it takes values of `kind`; else null and why not.
const AuxValues::Slot *AuxValues::slot_for(const std::string &name, int kind,
                                           std::string &error) const {
  for (const Slot &slot : slots_) {
    if (slot.name != name) continue;
    const Kind want = kind_of(slot.type);
    if (static_cast<int>(want) == kind) return &slot;
    error = "aux field '" + name + "' is " + slot.type + ": expected " + kind_name(want) +
            ", not " + kind_name(static_cast<Kind>(kind));
    return nullptr;
  }
  error = "no aux field '" + name + "'";
  return nullptr;
}

std::string AuxValues::set(const std::string &name, const void *device_pointer) {
  std::string error;
  const Slot *slot = slot_for(name, static_cast<int>(Kind::pointer), error);
  if (slot) std::memcpy(bytes_ + slot->offset, &device_pointer, sizeof(device_pointer));
  return error;
}

std::string AuxValues::set(const std::string &name, long long value) {
  std::string error;
  const Slot *slot = slot_for(name, static_cast<int>(Kind::integer), error);
  if (!slot) return error;
  if (slot->type == "int") {
    const int narrow = static_cast<int>(value);
    if (narrow != value)
      return "aux field '" + name + "' is int: " + std::to_string(value) + " does not fit";
    std::memcpy(bytes_ + slot->offset, &narrow, sizeof(narrow));
  } else {
    std::memcpy(bytes_ + slot->offset, &value, sizeof(value));
  }
  return "";
}

std::string AuxValues::set(const std::string &name, float value) {
  std::string error;
  const Slot *slot = slot_for(name, static_cast<int>(Kind::real), error);
  if (slot) std::memcpy(bytes_ + slot->offset, &value, sizeof(value));
  return error;
}

}  // namespace flashjit
