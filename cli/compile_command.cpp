// `flashjit compile`: NVRTC to a cubin, then the kernel's resources. Works
// with no GPU (--arch): registers and spills then come from ptxas's report.
#include <cmath>

#include "cli/commands.h"
#include "generator/warp_roles.h"
#include "cli/ptxas_report.h"
#include "generator/source.h"
#include "generator/backward_spec.h"
#include "runtime/loaded_kernel.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

CompileCommand::CompileCommand(cl::OptionCategory &category)
    : arch("arch", cl::desc("Target architecture (default: the GPU's); needs no GPU"),
           cl::value_desc("sm_90a|sm_80|..."), cl::cat(category), cl::sub(sub)),
      output("o", cl::desc("Write the cubin to FILE"), cl::value_desc("FILE"), cl::cat(category),
             cl::sub(sub)),
      modifiers(category, sub) {}

namespace {

struct Resources {
  int registers = 0;
  int static_smem = 0;
  int local_bytes = 0;  // spills and stack, per thread
  int spill_stores = -1;  // -1: unknown (only ptxas reports them apart)
  int spill_loads = -1;
  int occupancy = 0;  // CTAs per SM; 0: unknown (no GPU)
  std::string source;
};

llvm::Error write_file(llvm::StringRef path, const std::vector<char> &bytes) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec)
    return llvm::createStringError(ec, llvm::formatv("-o {0}: {1}", path, ec.message()).str());
  os.write(bytes.data(), bytes.size());
  os.close();
  if (os.has_error())
    return llvm::createStringError(os.error(),
                                   llvm::formatv("-o {0}: {1}", path, os.error().message()).str());
  return llvm::Error::success();
}

}  // namespace

int CompileCommand::run(const CommonOptions &common, const ProblemOptions &problem) const {
  int code = kExitOk;
  auto kernel = resolve_kernel(problem, arch, code, modifiers.given());
  if (!kernel) return report_error(code, kernel.takeError());
  if (llvm::Error e = modifiers.apply(*kernel, code)) return report_error(code, std::move(e));
  GeneratedSource source = kernel->spec.pass == Pass::backward ? generate_backward(kernel->spec)
                                                                : generate_forward(kernel->spec);
  source.options.push_back("--ptxas-options=-v");
  auto cubin = compile_to_cubin(source, kernel->spec.arch);
  if (!cubin) return report_error(kExitFailure, cubin.takeError());

  // The main kernel's resources (the backward's: flashjit_bwd_sm80).
  const LaunchGeometry geometry = kernel->spec.pass == Pass::backward
                                      ? backward_launch_geometry(kernel->spec, kernel->problem)
                                      : forward_launch_geometry(kernel->spec, kernel->problem);
  Resources res;
  if (auto report = parse_ptxas_report(cubin->log, source.entry)) {
    res.registers = report->registers;
    res.static_smem = report->static_smem_bytes;
    res.local_bytes = report->stack_frame_bytes;
    res.spill_stores = report->spill_store_bytes;
    res.spill_loads = report->spill_load_bytes;
    res.source = "ptxas";
  }
  if (kernel->device_matches) {
    // The loaded function is the ground truth; ptxas's report fills in the
    // split of local memory into spills.
    auto loaded = LoadedKernel::load(cubin->bytes, source.entry, geometry.dynamic_smem_bytes);
    if (!loaded) return report_error(kExitFailure, loaded.takeError());
    const KernelAttributes &attrs = loaded->attributes();
    res.registers = attrs.registers;
    res.static_smem = attrs.static_smem_bytes;
    res.local_bytes = attrs.local_bytes;
    res.source = "loaded on the GPU";
    if (auto occupancy = loaded->occupancy(static_cast<int>(geometry.block.x)))
      res.occupancy = *occupancy;
    else
      llvm::consumeError(occupancy.takeError());
  }
  if (!output.empty())
    if (auto error = write_file(output, cubin->bytes)) return report_error(kExitFailure, std::move(error));

  const KernelSpec &spec = kernel->spec;
  // The sm90 kernels' setmaxnreg budgets: what each warp role runs with
  // after the launch's uniform allocation (`registers`).
  const std::optional<WarpRoleRegisters> roles = warp_role_registers(spec);
  if (common.json) {
    llvm::json::Object o{{"id", spec.id()},
                         {"arch", spec.arch.name()},
                         {"problem", problem_json(kernel->problem)},
                         {"config", config_json(spec.config)},
                         {"registers", res.registers},
                         {"static_smem_bytes", res.static_smem},
                         {"dynamic_smem_bytes", geometry.dynamic_smem_bytes},
                         {"local_bytes", res.local_bytes},
                         {"threads", geometry.block.x},
                         {"compile_ms", std::round(cubin->compile_ms * 100) / 100},
                         {"cubin_bytes", int64_t(cubin->bytes.size())},
                         {"resources_from", res.source}};
    if (res.spill_stores >= 0) {
      o["spill_store_bytes"] = res.spill_stores;
      o["spill_load_bytes"] = res.spill_loads;
    }
    if (res.occupancy > 0) o["ctas_per_sm"] = res.occupancy;
    if (roles)
      o["warp_roles"] = llvm::json::Object{{"producer_registers", roles->producer},
                                           {"consumer_registers", roles->consumer},
                                           {"consumer_warpgroups", roles->consumer_warpgroups}};
    if (!output.empty()) o["output"] = output.getValue();
    print_json(std::move(o));
    return kExitOk;
  }

  llvm::raw_ostream &os = llvm::outs();
  os << llvm::formatv("kernel     {0}\n", spec.id());
  os << llvm::formatv("arch       {0}\n", spec.arch.name());
  os << llvm::formatv("config     {0} ({1} threads)\n", describe(spec.config), geometry.block.x);
  os << llvm::formatv("registers  {0}\n", res.registers);
  if (roles)
    os << llvm::formatv("roles      producer warpgroup {0} registers, {1} consumer warpgroups {2} "
                        "each (setmaxnreg)\n",
                        roles->producer, roles->consumer_warpgroups, roles->consumer);
  os << llvm::formatv("smem       {0} static + {1} dynamic = {2} bytes\n", res.static_smem,
                      geometry.dynamic_smem_bytes, res.static_smem + geometry.dynamic_smem_bytes);
  if (res.spill_stores >= 0)
    os << llvm::formatv("spills     {0} bytes stores, {1} bytes loads ({2} bytes local)\n",
                        res.spill_stores, res.spill_loads, res.local_bytes);
  else
    os << llvm::formatv("spills     {0} bytes local\n", res.local_bytes);
  if (res.occupancy > 0) os << llvm::formatv("occupancy  {0} CTAs/SM\n", res.occupancy);
  os << llvm::formatv("compile    {0:f1} ms\n", cubin->compile_ms);
  os << llvm::formatv("cubin      {0} bytes{1}\n", cubin->bytes.size(),
                      output.empty() ? std::string() : " -> " + output.getValue());
  os << llvm::formatv("resources  from {0}\n", res.source.empty() ? "nowhere" : res.source);
  return kExitOk;
}

}  // namespace flashjit::cli
