// Every field of a TuningRecord, once: its column in `tunings`, its place in
// the YAML export, and whether it is part of the key. The SQL statements, the
// row reader and the YAML reader/writer are all generated from this list, so
// a new field is one line here plus a migration that adds its column. The
// two configs (the tuned one and the heuristic's) share one list of
// StoredConfig's fields.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <variant>

#include "cache/tuning_db.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit::tuning_fields {

using FieldRef = std::variant<std::string *, int *, int64_t *, double *, bool *>;

enum class Role {
  key,     // device, software and the problem class: equal in an exact lookup
  bucket,  // part of the key, but nearest_tunings lets it differ
  value,
};

struct Field {
  const char *group;  // the YAML mapping it sits in; "" at the top level
  const char *name;   // its key within the group
  Role role;
  bool required;   // an imported record without it is skipped
  bool non_empty;  // a string that must not be empty to be meaningful
  std::function<FieldRef(TuningRecord &)> ref;

  // "<group>_<name>", or the name alone at the top level.
  std::string column() const;
  // "<group>.<name>", for messages.
  std::string display() const;
  bool in_key() const { return role != Role::value; }
};

// In YAML order, groups contiguous (columns added by a migration come last in
// the table, but every statement names its columns).
llvm::ArrayRef<Field> fields();

inline FieldRef ref(const Field &field, const TuningRecord &record) {
  // The table's accessors are written once for the mutable record; reading
  // through them does not write.
  return field.ref(const_cast<TuningRecord &>(record));
}

// Comma-separated column names, in fields() order.
std::string column_list();

// A field of StoredConfig: its key in the YAML export's `config` and
// `heuristic_config` mappings and the end of its columns (config_<name>,
// heuristic_config_<name>), named as KernelConfig's field it stores
// (flashjit/kernel_config_fields.h).
struct ConfigField {
  const char *name;
  // Of the tuned config; the heuristic's fields are neither (an export may
  // lack its config altogether).
  bool required;
  bool non_empty;
  FieldRef (*ref)(StoredConfig &);
};

// In YAML order.
llvm::ArrayRef<ConfigField> config_fields();
// The field called `name`, or null.
const ConfigField *find_config_field(llvm::StringRef name);

inline FieldRef ref(const ConfigField &field, const StoredConfig &config) {
  return field.ref(const_cast<StoredConfig &>(config));  // as ref() above
}

}  // namespace flashjit::tuning_fields
