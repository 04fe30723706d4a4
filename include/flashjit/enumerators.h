// Every value of the public enums, in declaration order, so that code that
// reads a to_string() name back (the tuner's worker protocol, the tuning
// database) tries them all, and its messages can list what is allowed.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "flashjit/problem.h"

namespace flashjit {

constexpr std::array<DType, 3> enumerators(DType) {
  return {DType::bf16, DType::fp16, DType::e4m3};
}
constexpr std::array<KvDType, 2> enumerators(KvDType) { return {KvDType::same, KvDType::e4m3}; }
constexpr std::array<OutDType, 3> enumerators(OutDType) {
  return {OutDType::automatic, OutDType::bf16, OutDType::fp16};
}
constexpr std::array<MaskKind, 3> enumerators(MaskKind) {
  return {MaskKind::none, MaskKind::causal, MaskKind::window};
}
constexpr std::array<KernelPath, 3> enumerators(KernelPath) {
  return {KernelPath::sm80, KernelPath::sm90, KernelPath::automatic};
}
constexpr std::array<GqaPacking, 3> enumerators(GqaPacking) {
  return {GqaPacking::automatic, GqaPacking::on, GqaPacking::off};
}

// The value whose to_string() is `text`; false, and `out` untouched, when
// there is none.
template <typename Enum>
bool from_string(std::string_view text, Enum &out) {
  for (Enum value : enumerators(Enum{}))
    if (text == to_string(value)) {
      out = value;
      return true;
    }
  return false;
}

// Their names for a message: "auto, on or off".
template <typename Enum>
std::string enumerator_list() {
  constexpr auto values = enumerators(Enum{});
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += i + 1 == values.size() ? " or " : ", ";
    out += to_string(values[i]);
  }
  return out;
}

}  // namespace flashjit
