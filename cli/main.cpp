// flashjit: generate, compile, run and inspect attention kernels.
#include "cli/commands.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;
using namespace flashjit::cli;

namespace {

// llvm::cl reports "flashjit: <problem>"; say "flashjit: error: <problem>"
// like every other message of the tool.
// Its follow-up lines ("Did you mean '--hdim'?") are notes.
void print_parse_errors(llvm::StringRef text) {
  while (!text.empty()) {
    auto [line, rest] = text.split('\n');
    text = rest;
    line = line.trim();
    if (line.empty()) continue;
    line.consume_front("flashjit:");
    line = line.trim();
    if (line.startswith("Did you mean"))
      llvm::errs() << "flashjit: note: " << line << "\n";
    else
      report_error(kExitUsage, line);
  }
}

}  // namespace

int main(int argc, char **argv) {
  cl::OptionCategory category("flashjit options");
  InfoCommand info;
  GenCommand gen(category);
  CompileCommand compile(category);
  RunCommand run(category);
  ProblemOptions problem(category, gen.sub, compile.sub, run.sub);
  CommonOptions common(category, info.sub, gen.sub, compile.sub, run.sub);
  for (cl::SubCommand *sub : {&*cl::TopLevelSubCommand, &info.sub, &gen.sub, &compile.sub, &run.sub})
    cl::HideUnrelatedOptions(category, *sub);

  std::string errors;
  llvm::raw_string_ostream error_stream(errors);
  if (!cl::ParseCommandLineOptions(argc, argv, "flashjit: JIT-generated attention kernels\n",
                                   &error_stream, nullptr, /*LongOptionsUseDoubleDash=*/true)) {
    print_parse_errors(error_stream.str());
    return kExitUsage;
  }

  if (info.sub) return info.run(common);
  if (gen.sub) return gen.run(common, problem);
  if (compile.sub) return compile.run(common, problem);
  if (run.sub) return run.run(common, problem);
  return report_error(kExitUsage,
                      "expected a subcommand: info, gen, compile or run (see flashjit --help)");
}
