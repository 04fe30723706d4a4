#include "cache/tuning_fields.h"

#include <iterator>
#include <vector>

namespace flashjit::tuning_fields {

namespace {

// name, required, non_empty (in the tuned config)
#define CONFIG_FIELD(name, required, non_empty) \
  ConfigField{#name, required, non_empty, [](StoredConfig &c) -> FieldRef { return &c.name; }}

const ConfigField kConfigFields[] = {
    CONFIG_FIELD(path, true, true),
    CONFIG_FIELD(block_m, true, false),
    CONFIG_FIELD(block_n, true, false),
    CONFIG_FIELD(warps, true, false),
    CONFIG_FIELD(stages, true, false),
    // Schema 2. Not required: an export of schema 1 has neither (the
    // defaults are what its kernels ran).
    CONFIG_FIELD(splits, false, false),
    CONFIG_FIELD(pack_gqa, false, true),
};

#undef CONFIG_FIELD

// group, name, role, required, non_empty, member
#define FIELD(group, name, role, required, non_empty, member) \
  Field{group, name, Role::role, required, non_empty,         \
        [](TuningRecord &r) -> FieldRef { return &r.member; }}

const Field kKeyFields[] = {
    FIELD("device", "name", key, true, true, device.name),
    FIELD("device", "cc_major", key, true, false, device.cc_major),
    FIELD("device", "cc_minor", key, true, false, device.cc_minor),
    FIELD("device", "sm_count", key, true, false, device.sm_count),
    FIELD("device", "driver_version", key, true, false, device.driver_version),
    FIELD("software", "nvrtc_version", key, true, true, software.nvrtc_version),
    FIELD("software", "templates_hash", key, true, true, software.templates_hash),
    FIELD("problem", "pass", key, true, true, problem.pass),
    FIELD("problem", "dtype", key, true, true, problem.dtype),
    FIELD("problem", "head_dim_qk", key, true, false, problem.head_dim_qk),
    FIELD("problem", "head_dim_v", key, true, false, problem.head_dim_v),
    FIELD("problem", "mask", key, true, true, problem.mask),
    FIELD("problem", "window_left", key, true, false, problem.window_left),
    FIELD("problem", "window_right", key, true, false, problem.window_right),
    FIELD("problem", "softcap", key, true, false, problem.softcap),
    FIELD("problem", "gqa_ratio", key, true, false, problem.gqa_ratio),
    // Schema 3. Not required: exports before it were all contiguous.
    FIELD("problem", "kv_layout", key, false, true, problem.kv_layout),
    // Schema 4. Not required: exports before it had no modifiers.
    FIELD("problem", "modifiers", key, false, false, problem.modifiers),
    // Schema 5. Not required: exports before it were all same and auto.
    FIELD("problem", "kv_dtype", key, false, true, problem.kv_dtype),
    FIELD("problem", "out_dtype", key, false, true, problem.out_dtype),
    FIELD("problem", "seqlen_q_bucket", bucket, true, false, problem.seqlen_q_bucket),
    FIELD("problem", "seqlen_k_bucket", bucket, true, false, problem.seqlen_k_bucket),
    FIELD("problem", "batch_heads_bucket", bucket, true, false, problem.batch_heads_bucket),
};

// Measurements and provenance: an export from a hand-edited file may lack
// them; the row is still a usable config.
const Field kMeasurementFields[] = {
    FIELD("", "shape", value, false, false, shape),
    FIELD("", "median_ms", value, true, false, median_ms),
    FIELD("", "min_ms", value, false, false, min_ms),
    FIELD("", "max_ms", value, false, false, max_ms),
    FIELD("", "tflops", value, false, false, tflops),
    FIELD("", "heuristic_ms", value, false, false, heuristic_ms),
    FIELD("", "occupancy", value, false, false, occupancy),
    FIELD("", "registers", value, false, false, registers),
    FIELD("", "smem_bytes", value, false, false, smem_bytes),
    FIELD("", "spill_bytes", value, false, false, spill_bytes),
    FIELD("", "candidates_tried", value, false, false, candidates_tried),
    FIELD("", "candidates_failed", value, false, false, candidates_failed),
    FIELD("", "tuned_at", value, false, false, tuned_at),
    FIELD("", "flashjit_version", value, false, false, flashjit_version),
    FIELD("", "cubin_key", value, false, false, cubin_key),
};

#undef FIELD

// The rows of one of the record's configs, under `group`.
void append_config(std::vector<Field> &out, const char *group, StoredConfig TuningRecord::*config,
                   bool tuned) {
  for (const ConfigField &field : kConfigFields)
    out.push_back(Field{group, field.name, Role::value, tuned && field.required,
                        tuned && field.non_empty,
                        [config, &field](TuningRecord &r) { return field.ref(r.*config); }});
}

std::vector<Field> all_fields() {
  std::vector<Field> out(std::begin(kKeyFields), std::end(kKeyFields));
  append_config(out, "config", &TuningRecord::config, /*tuned=*/true);
  out.insert(out.end(), std::begin(kMeasurementFields), std::end(kMeasurementFields));
  append_config(out, "heuristic_config", &TuningRecord::heuristic_config, /*tuned=*/false);
  return out;
}

}  // namespace

std::string Field::column() const {
  std::string g = group;
  return g.empty() ? std::string(name) : g + "_" + name;
}

std::string Field::display() const {
  std::string g = group;
  return g.empty() ? std::string(name) : g + "." + name;
}

llvm::ArrayRef<Field> fields() {
  static const std::vector<Field> all = all_fields();
  return all;
}

std::string column_list() {
  std::string out;
  for (const Field &field : fields()) {
    if (!out.empty()) out += ", ";
    out += field.column();
  }
  return out;
}

llvm::ArrayRef<ConfigField> config_fields() { return kConfigFields; }

const ConfigField *find_config_field(llvm::StringRef name) {
  for (const ConfigField &field : kConfigFields)
    if (name == field.name) return &field;
  return nullptr;
}

}  // namespace flashjit::tuning_fields
