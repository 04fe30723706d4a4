// Shared by the sm90 compile tests: compiles a generated program for sm_90a
// with ptxas's report, and says what is wrong with it (no report, or wgmmas
// ptxas serialised), keeping the cubin for further checks (SASS).
#pragma once

#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include "cli/ptxas_report.h"
#include "generator/bwd_sm90_traits.h"
#include "generator/kernel_spec.h"
#include "generator/source.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/ThreadPool.h"
#include "runtime/nvrtc_compiler.h"

namespace flashjit::testing {

// What the sm90 backward's resident loop over work items (bwd_sm90.cuh,
// kResident) may add to a config's known spills: its producer and dQ
// writer, on 24 registers, keep an item's state in local memory
// (BwdSm90Traits::kProducerSpillBytes).
constexpr int kResidentLoopSpillBytes = BwdSm90Traits::kProducerSpillBytes;

// cuobjdump from $FLASHJIT_CUOBJDUMP or PATH; empty when neither has it.
inline std::string find_cuobjdump() {
  if (const char *env = std::getenv("FLASHJIT_CUOBJDUMP"); env && *env) return env;
  if (auto path = llvm::sys::findProgramByName("cuobjdump")) return *path;
  return "";
}

// What `cuobjdump <flag> <cubin>` prints, or nothing when it fails.
inline std::optional<std::string> cuobjdump_output(const Cubin &cubin, const std::string &cuobjdump,
                                                   llvm::StringRef flag) {
  llvm::SmallString<128> cubin_path, text_path;
  llvm::sys::fs::createTemporaryFile("flashjit_sm90", "cubin", cubin_path);
  llvm::sys::fs::createTemporaryFile("flashjit_sm90", "txt", text_path);
  {
    std::ofstream out(cubin_path.c_str(), std::ios::binary);
    out.write(cubin.bytes.data(), static_cast<std::streamsize>(cubin.bytes.size()));
  }
  llvm::Optional<llvm::StringRef> redirects[] = {llvm::None, llvm::StringRef(text_path),
                                                 llvm::None};
  int rc = llvm::sys::ExecuteAndWait(cuobjdump, {cuobjdump, flag, cubin_path.str()}, llvm::None,
                                     redirects);
  std::ifstream in(text_path.c_str());
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  llvm::sys::fs::remove(cubin_path);
  llvm::sys::fs::remove(text_path);
  if (rc != 0) return std::nullopt;
  return text;
}

// The resources cuobjdump -res-usage lists for the cubin's first function
// ("REG:168 STACK:0 SHARED:1024 LOCAL:0 ..."). Spills live in the stack
// frame, so STACK stands for both spill counts: stricter than ptxas's own.
// SHARED is left out: it counts the dynamic array's alignment, ptxas not.
inline std::optional<cli::PtxasReport> report_from_cuobjdump(const Cubin &cubin,
                                                             const std::string &cuobjdump) {
  auto text = cuobjdump_output(cubin, cuobjdump, "-res-usage");
  if (!text) return std::nullopt;
  std::smatch m;
  if (!std::regex_search(*text, m, std::regex(R"(REG:(\d+) STACK:(\d+) SHARED:\d+ LOCAL:(\d+))")))
    return std::nullopt;
  cli::PtxasReport r;
  r.registers = std::stoi(m[1]);
  r.stack_frame_bytes = std::stoi(m[2]);
  r.spill_store_bytes = r.spill_load_bytes = r.stack_frame_bytes + std::stoi(m[3]);
  return r;
}

struct Sm90Compiled {
  std::string error;  // empty: compiled, reported, wgmmas asynchronous
  cli::PtxasReport report;
  std::optional<Cubin> cubin;
};

// `cuobjdump` (may be empty) stands in for ptxas's report when NVRTC's log
// has none: on the GPU machine NVRTC 13.0 returned an empty log for a few
// programs, the same ones in every run, also compiled one at a time, while
// here (no driver) it never did. The cubins were fine.
inline Sm90Compiled compile_sm90_with_report(GeneratedSource source, const TargetArch &arch,
                                             const std::string &cuobjdump) {
  Sm90Compiled r;
  source.options.push_back("--ptxas-options=-v");
  auto cubin = compile_to_cubin(source, arch);
  if (!cubin) {
    r.error = llvm::toString(cubin.takeError());
    return r;
  }
  auto report = cli::parse_ptxas_report(cubin->log, source.entry);
  if (!report && !cuobjdump.empty()) report = report_from_cuobjdump(*cubin, cuobjdump);
  if (!report) {
    r.error = "no ptxas report in the log (and no cuobjdump to stand in):\n" + cubin->log;
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

// One compiled variant of a parallel compile: the spec's ID (empty when the
// spec was refused, the refusal then in result.error) and the result.
struct CompiledVariant {
  std::string id;
  Sm90Compiled result;
};

// Compiles `count` forward specs, make_spec(i) for i < count, for `arch` in
// parallel (one NVRTC run a hardware thread), with ptxas's report.
template <class MakeSpec>
std::vector<CompiledVariant> compile_forward_variants(size_t count, MakeSpec make_spec,
                                               const TargetArch &arch) {
  const std::string cuobjdump = find_cuobjdump();
  std::vector<CompiledVariant> out(count);
  llvm::ThreadPool pool(llvm::hardware_concurrency());
  for (size_t i = 0; i < count; ++i)
    pool.async([&, i] {
      llvm::Expected<KernelSpec> spec = make_spec(i);
      if (!spec) {
        out[i].result.error = llvm::toString(spec.takeError());
        return;
      }
      out[i].id = spec->id();
      out[i].result = compile_sm90_with_report(generate_forward(*spec), arch, cuobjdump);
    });
  pool.wait();
  return out;
}

// What every compile test asks of a variant: compiled, reported, no spills
// (or at most `allowed_spill_bytes`, e.g. kResidentLoopSpillBytes for the
// sm90 backward's producer), and each of `entries` in its cubin.
inline void expect_clean(const CompiledVariant &v, std::initializer_list<const char *> entries,
                         int allowed_spill_bytes = 0) {
  SCOPED_TRACE(v.id);
  EXPECT_EQ(v.result.error, "");
  EXPECT_LE(v.result.report.spill_store_bytes, allowed_spill_bytes);
  EXPECT_LE(v.result.report.spill_load_bytes, allowed_spill_bytes);
  ASSERT_TRUE(v.result.cubin.has_value());
  const std::string bytes(v.result.cubin->bytes.begin(), v.result.cubin->bytes.end());
  for (const char *entry : entries) EXPECT_NE(bytes.find(entry), std::string::npos) << entry;
}

}  // namespace flashjit::testing
