#include "cache/tuning_fields.h"

namespace flashjit::tuning_fields {

namespace {

// group, name, role, required, non_empty, member
#define FIELD(group, name, role, required, non_empty, member) \
  Field{group, name, Role::role, required, non_empty,         \
        [](TuningRecord &r) -> FieldRef { return &r.member; }}

const Field kFields[] = {
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
    FIELD("problem", "seqlen_q_bucket", bucket, true, false, problem.seqlen_q_bucket),
    FIELD("problem", "seqlen_k_bucket", bucket, true, false, problem.seqlen_k_bucket),
    FIELD("problem", "batch_heads_bucket", bucket, true, false, problem.batch_heads_bucket),
    FIELD("config", "path", value, true, true, config.path),
    FIELD("config", "block_m", value, true, false, config.block_m),
    FIELD("config", "block_n", value, true, false, config.block_n),
    FIELD("config", "warps", value, true, false, config.warps),
    FIELD("config", "stages", value, true, false, config.stages),
    // Schema 2. Not required: an export of schema 1 has neither (the
    // defaults are what its kernels ran).
    FIELD("config", "splits", value, false, false, config.splits),
    FIELD("config", "pack_gqa", value, false, true, config.pack_gqa),
    // Measurements and provenance: an export from a hand-edited file may
    // lack them; the row is still a usable config.
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
    FIELD("heuristic_config", "path", value, false, false, heuristic_config.path),
    FIELD("heuristic_config", "block_m", value, false, false, heuristic_config.block_m),
    FIELD("heuristic_config", "block_n", value, false, false, heuristic_config.block_n),
    FIELD("heuristic_config", "warps", value, false, false, heuristic_config.warps),
    FIELD("heuristic_config", "stages", value, false, false, heuristic_config.stages),
    FIELD("heuristic_config", "splits", value, false, false, heuristic_config.splits),
    FIELD("heuristic_config", "pack_gqa", value, false, false, heuristic_config.pack_gqa),
};

#undef FIELD

}  // namespace

std::string Field::column() const {
  std::string g = group;
  return g.empty() ? std::string(name) : g + "_" + name;
}

std::string Field::display() const {
  std::string g = group;
  return g.empty() ? std::string(name) : g + "." + name;
}

llvm::ArrayRef<Field> fields() { return kFields; }

std::string column_list() {
  std::string out;
  for (const Field &field : fields()) {
    if (!out.empty()) out += ", ";
    out += field.column();
  }
  return out;
}

}  // namespace flashjit::tuning_fields
