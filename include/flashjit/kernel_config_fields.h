// Every field of KernelConfig, once, with its twin in the C API's
// flashjit_config. The layers derive what would otherwise be one hand-kept
// copy each from this table: the C API's conversion, the tuner's worker
// protocol, the call key's hash, the tuning database's config (to_stored,
// from_stored) and the CLI's JSON. What cannot be derived (the ctypes mirror,
// tests/python/abi_layout.c, the database's columns, the CLI's flags,
// describe() and KernelSpec::id) is checked against it by
// tests/unit/field_tables_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <tuple>

#include "flashjit/flashjit.h"
#include "flashjit/problem.h"

namespace flashjit {

template <typename T>
struct KernelConfigField {
  // The member's name in KernelConfig and flashjit_config, and its key in the
  // worker protocol, the tuning database (columns config_<name>), the YAML
  // export and the CLI's JSON.
  const char *name;
  T KernelConfig::*member;
  int32_t flashjit_config::*c_member;
  // The tuner chooses it and a tuning stores it (StoredConfig). false: the
  // caller's choice alone; deterministic picks the tuning's class (pass
  // "bwd-det") instead.
  bool tuned;
};

// Spells each name once, so the string, the C++ member and the C member
// cannot disagree.
// clang-format off
#define FLASHJIT_CONFIG_FIELD(name, tuned) \
  KernelConfigField<decltype(KernelConfig::name)>{ \
      #name, &KernelConfig::name, &flashjit_config::name, tuned}
// clang-format on

// In declaration order, which is also flashjit_config's: fields are only ever
// appended there, so a zeroed struct of an older header keeps its meaning.
inline constexpr std::tuple kKernelConfigFields{
    FLASHJIT_CONFIG_FIELD(path, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(block_m, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(block_n, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(warps, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(stages, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(deterministic, /*tuned=*/false),
    FLASHJIT_CONFIG_FIELD(splits, /*tuned=*/true),
    FLASHJIT_CONFIG_FIELD(pack_gqa, /*tuned=*/true),
};

#undef FLASHJIT_CONFIG_FIELD

inline constexpr std::size_t kKernelConfigFieldCount =
    std::tuple_size_v<decltype(kKernelConfigFields)>;

// Every field of flashjit_config is an int32_t, so its size counts them: a C
// field the table lacks fails here (a table field the C struct lacks fails
// to compile above).
static_assert(sizeof(flashjit_config) == kKernelConfigFieldCount * sizeof(int32_t),
              "flashjit_config and kKernelConfigFields list different fields");

// Calls visit(field) for every field, in order; `field` is a
// KernelConfigField<T> of the member's type.
template <typename Visit>
constexpr void for_each_kernel_config_field(Visit &&visit) {
  std::apply([&](const auto &...field) { (visit(field), ...); }, kKernelConfigFields);
}

}  // namespace flashjit
