// `flashjit gen`: the source NVRTC would compile for a problem and config.
#include "cli/commands.h"
#include "generator/source.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

namespace flashjit::cli {

GenCommand::GenCommand(cl::OptionCategory &category)
    : expanded("expanded", cl::desc("Inline every template, giving one file nvcc compiles offline"),
               cl::cat(category), cl::sub(sub)),
      arch("arch", cl::desc("Target architecture (default: the GPU's)"),
           cl::value_desc("sm_90a|sm_80|..."), cl::cat(category), cl::sub(sub)),
      modifiers(category, sub) {}

int GenCommand::run(const CommonOptions &common, const ProblemOptions &problem) const {
  int code = kExitOk;
  auto kernel = resolve_kernel(problem, arch, code, modifiers.given());
  if (!kernel) return report_error(code, kernel.takeError());
  if (llvm::Error e = modifiers.apply(*kernel, code)) return report_error(code, std::move(e));
  const GeneratedSource source = kernel->spec.pass == Pass::backward
                                     ? generate_backward(kernel->spec)
                                     : generate_forward(kernel->spec);
  const std::string text = expanded ? source.expanded() : source.source;
  if (common.json) {
    llvm::json::Array options;
    for (const std::string &o : source.options) options.push_back(o);
    print_json(llvm::json::Object{{"id", kernel->spec.id()},
                                  {"arch", kernel->spec.arch.name()},
                                  {"program_name", source.program_name},
                                  {"entry", source.entry},
                                  {"options", std::move(options)},
                                  {"problem", problem_json(kernel->problem)},
                                  {"config", config_json(kernel->spec.config)},
                                  {"source", text}});
    return kExitOk;
  }
  llvm::outs() << text;
  return kExitOk;
}

}  // namespace flashjit::cli
