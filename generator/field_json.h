// The JSON value of a Problem or KernelConfig field (the tables in
// flashjit/problem_fields.h and flashjit/kernel_config_fields.h), for the
// tuner's worker protocol and the CLI's --json output.
#pragma once

#include <type_traits>

#include "flashjit/problem.h"
#include "llvm/Support/JSON.h"

namespace flashjit {

// Enums by their to_string() name, floats as doubles (exact both ways), the
// rest as they are.
template <typename T>
llvm::json::Value field_json(T value) {
  if constexpr (std::is_enum_v<T>)
    return to_string(value);
  else if constexpr (std::is_floating_point_v<T>)
    return double(value);
  else
    return value;
}

}  // namespace flashjit
