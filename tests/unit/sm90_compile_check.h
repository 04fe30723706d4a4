// Shared by the sm90 compile tests: compiles a generated program for sm_90a
// with ptxas's report, and says what is wrong with it (no report, or wgmmas
// ptxas serialised), keeping the cubin for further checks (SASS).
#pragma once

#include <mutex>
#include <optional>
#include <string>

#include "cli/ptxas_report.h"
#include "generator/source.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit::testing {

struct Sm90Compiled {
  std::string error;  // empty: compiled, reported, wgmmas asynchronous
  cli::PtxasReport report;
  std::optional<Cubin> cubin;
};

inline Sm90Compiled compile_sm90_with_report(GeneratedSource source, const TargetArch &arch) {
  Sm90Compiled r;
  source.options.push_back("--ptxas-options=-v");
  // ptxas's report reaches NVRTC's log only one compile at a time: on the GPU
  // machine (16 threads, cuobjdump forked alongside) NVRTC 13.0 returned empty
  // logs for some concurrent compiles, and kept doing so for those programs
  // when they were retried afterwards. The cubins were fine; the report was
  // lost. So reports are taken serially.
  static std::mutex one_reported_compile_at_a_time;
  std::lock_guard<std::mutex> lock(one_reported_compile_at_a_time);
  auto cubin = compile_to_cubin(source, arch);
  if (!cubin) {
    r.error = llvm::toString(cubin.takeError());
    return r;
  }
  auto report = cli::parse_ptxas_report(cubin->log, source.entry);
  if (!report) {
    r.error = "no ptxas report in the log:\n" + cubin->log;
    return r;
  }
  r.report = *report;
  for (const char *serialised :
       {"C7510", "C7511", "C7512", "C7514", "wgmma.mma_async instructions are serialized"})
    if (cubin->log.find(serialised) != std::string::npos)
      r.error = "ptxas serialised the wgmmas:\n" + cubin->log;
  r.cubin = std::move(*cubin);
  return r;
}

}  // namespace flashjit::testing
