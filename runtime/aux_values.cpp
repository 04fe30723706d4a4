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
  return kind == Kind::pointer ? "a device pointer" : kind == Kind::real ? "a float" : "an integer";
}
}  // namespace

std::string AuxValues::set(const std::string &name, const void *device_pointer) {
  for (const Slot &slot : slots_) {
    if (slot.name != name) continue;
    if (kind_of(slot.type) != Kind::pointer)
      return "aux field '" + name + "' is " + slot.type + ": expected " +
             kind_name(kind_of(slot.type)) + ", not a pointer";
    std::memcpy(bytes_ + slot.offset, &device_pointer, sizeof(device_pointer));
    return "";
  }
  return "no aux field '" + name + "'";
}

std::string AuxValues::set(const std::string &name, long long value) {
  for (const Slot &slot : slots_) {
    if (slot.name != name) continue;
    if (kind_of(slot.type) != Kind::integer)
      return "aux field '" + name + "' is " + slot.type + ": expected " +
             kind_name(kind_of(slot.type)) + ", not an integer";
    if (slot.type == "int") {
      const int narrow = static_cast<int>(value);
      if (narrow != value) return "aux field '" + name + "' is int: " + std::to_string(value) + " does not fit";
      std::memcpy(bytes_ + slot.offset, &narrow, sizeof(narrow));
    } else {
      std::memcpy(bytes_ + slot.offset, &value, sizeof(value));
    }
    return "";
  }
  return "no aux field '" + name + "'";
}

std::string AuxValues::set(const std::string &name, float value) {
  for (const Slot &slot : slots_) {
    if (slot.name != name) continue;
    if (kind_of(slot.type) != Kind::real)
      return "aux field '" + name + "' is " + slot.type + ": expected " +
             kind_name(kind_of(slot.type)) + ", not a float";
    std::memcpy(bytes_ + slot.offset, &value, sizeof(value));
    return "";
  }
  return "no aux field '" + name + "'";
}

}  // namespace flashjit
