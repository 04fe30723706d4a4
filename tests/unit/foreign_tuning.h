// A tuning record as one from another machine ("Test GPU 9000", sm_90, 132
// SMs: a GPU no test host has), for the CLI tests that read tunings back
// (`flashjit query --device-name`). The numbers the tests assert on are the
// caller's; the rest is fixed.
#pragma once

#include <string>

#include "cache/tuning_db.h"
#include "flashjit/problem.h"
#include "runtime/tuning_key.h"
#include "llvm/Support/JSON.h"

namespace flashjit::testing {

struct ForeignMeasurement {
  StoredConfig config, heuristic_config;
  double median_ms = 0, min_ms = 0, max_ms = 0, heuristic_ms = 0, tflops = 0;
  int registers = 0, smem_bytes = 0, candidates_tried = 0, candidates_failed = 0;
};

inline TuningRecord foreign_tuning(const SoftwareFingerprint &software, const Problem &problem,
                                   const std::string &pass, const ForeignMeasurement &m) {
  TuningRecord r;
  r.device = DeviceFingerprint{"Test GPU 9000", 9, 0, 132, 13000};
  r.software = software;
  r.problem = problem_class_key(problem, pass);
  r.config = m.config;
  r.heuristic_config = m.heuristic_config;
  r.shape = describe(problem);
  r.median_ms = m.median_ms;
  r.min_ms = m.min_ms;
  r.max_ms = m.max_ms;
  r.heuristic_ms = m.heuristic_ms;
  r.tflops = m.tflops;
  r.occupancy = 1;
  r.registers = m.registers;
  r.smem_bytes = m.smem_bytes;
  r.candidates_tried = m.candidates_tried;
  r.candidates_failed = m.candidates_failed;
  r.tuned_at = "2026-11-29T12:00:00Z";
  r.flashjit_version = FLASHJIT_VERSION;
  return r;
}

// The tiles of a config as `query --json` prints it (its "config" object),
// the fields a nearest bucket's heuristic is compared on.
inline StoredConfig json_tiles(const llvm::json::Object *config) {
  StoredConfig c;
  if (!config) return c;
  if (auto path = config->getString("path")) c.path = path->str();
  auto field = [&](const char *name) {
    auto v = config->getInteger(name);
    return v ? static_cast<int>(*v) : -1;
  };
  c.block_m = field("block_m");
  c.block_n = field("block_n");
  c.warps = field("warps");
  c.stages = field("stages");
  return c;
}

}  // namespace flashjit::testing
