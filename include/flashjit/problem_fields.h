// Every field of Problem, once, with its twin in the C API's
// flashjit_problem. The C API's conversion, the tuner's worker protocol and
// the CLI's JSON are derived from this table; the ctypes mirror,
// tests/python/abi_layout.c and the CLI's flags are checked against it by
// tests/unit/field_tables_test.cpp.
#pragma once

#include <cstddef>
#include <tuple>
#include <type_traits>

#include "flashjit/flashjit.h"
#include "flashjit/problem.h"

namespace flashjit {

template <typename T, typename C>
struct ProblemField {
  using c_type = C;
  // The member's name in Problem and flashjit_problem, and its key in the
  // worker protocol and the CLI's JSON.
  const char *name;
  T Problem::*member;
  C flashjit_problem::*c_member;  // enums are int32_t there
};

// Spells each name once, so the string, the C++ member and the C member
// cannot disagree.
// clang-format off
#define FLASHJIT_PROBLEM_FIELD(name) \
  ProblemField<decltype(Problem::name), decltype(flashjit_problem::name)>{ \
      #name, &Problem::name, &flashjit_problem::name}
// clang-format on

// In Problem's order (flashjit_problem's differs: its enums come first).
inline constexpr std::tuple kProblemFields{
    FLASHJIT_PROBLEM_FIELD(dtype),        FLASHJIT_PROBLEM_FIELD(batch),
    FLASHJIT_PROBLEM_FIELD(heads_q),      FLASHJIT_PROBLEM_FIELD(heads_kv),
    FLASHJIT_PROBLEM_FIELD(seqlen_q),     FLASHJIT_PROBLEM_FIELD(seqlen_k),
    FLASHJIT_PROBLEM_FIELD(head_dim_qk),  FLASHJIT_PROBLEM_FIELD(head_dim_v),
    FLASHJIT_PROBLEM_FIELD(mask),         FLASHJIT_PROBLEM_FIELD(window_left),
    FLASHJIT_PROBLEM_FIELD(window_right), FLASHJIT_PROBLEM_FIELD(softmax_scale),
    FLASHJIT_PROBLEM_FIELD(softcap),      FLASHJIT_PROBLEM_FIELD(seqused_k),
    FLASHJIT_PROBLEM_FIELD(page_size),    FLASHJIT_PROBLEM_FIELD(varlen),
    FLASHJIT_PROBLEM_FIELD(kv_dtype),     FLASHJIT_PROBLEM_FIELD(out_dtype),
    FLASHJIT_PROBLEM_FIELD(attention_chunk),
};

#undef FLASHJIT_PROBLEM_FIELD

inline constexpr std::size_t kProblemFieldCount = std::tuple_size_v<decltype(kProblemFields)>;

// Calls visit(field) for every field, in order; `field` is a
// ProblemField<T, C> of the member's C++ and C types.
template <typename Visit>
constexpr void for_each_problem_field(Visit &&visit) {
  std::apply([&](const auto &...field) { (visit(field), ...); }, kProblemFields);
}

// flashjit_problem has no padding (its last int32, attention_chunk, fills
// what would be tail padding), so its size is the sum of its fields': a C
// field the table lacks fails here (a table field the C struct lacks fails
// to compile above).
constexpr std::size_t problem_c_field_bytes() {
  std::size_t bytes = 0;
  for_each_problem_field(
      [&](const auto &field) { bytes += sizeof(typename std::decay_t<decltype(field)>::c_type); });
  return bytes;
}
static_assert(sizeof(flashjit_problem) == problem_c_field_bytes(),
              "flashjit_problem and kProblemFields list different fields");

}  // namespace flashjit
