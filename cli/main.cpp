// flashjit: generate, compile, run, tune and inspect attention kernels.
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
  if (argc > 1 && llvm::StringRef(argv[1]) == "worker") return run_worker(argc, argv);
  cl::OptionCategory category("flashjit options");
  InfoCommand info;
  GenCommand gen(category);
  CompileCommand compile(category);
  RunCommand run(category);
  TuneCommand tune(category);
  PrecompileCommand precompile(category);
  QueryCommand query(category);
  DbCommand db(category);
  ProblemOptions problem(category,
                         Subs{{&gen.sub, &compile.sub, &run.sub, &tune.sub, &precompile.sub,
                               &query.sub}},
                         Subs{{&gen.sub, &compile.sub, &run.sub}});
  CommonOptions common(category, Subs{{&info.sub, &gen.sub, &compile.sub, &run.sub, &tune.sub,
                                       &precompile.sub, &query.sub, &db.sub}});
  DbPathOption db_path(category,
                       Subs{{&info.sub, &tune.sub, &precompile.sub, &query.sub, &db.sub}});
  DbTrustOption db_trust(category, Subs{{&info.sub, &run.sub, &tune.sub, &precompile.sub,
                                          &query.sub, &db.sub}});
  for (cl::SubCommand *sub : {&*cl::TopLevelSubCommand, &info.sub, &gen.sub, &compile.sub,
                              &run.sub, &tune.sub, &precompile.sub, &query.sub, &db.sub})
    cl::HideUnrelatedOptions(category, *sub);

  std::string errors;
  llvm::raw_string_ostream error_stream(errors);
  if (!cl::ParseCommandLineOptions(argc, argv, "flashjit: JIT-generated attention kernels\n",
                                   &error_stream, nullptr, /*LongOptionsUseDoubleDash=*/true)) {
    print_parse_errors(error_stream.str());
    return kExitUsage;
  }

  if (llvm::Error e = db_trust.apply()) return report_error(kExitUsage, std::move(e));
  if (info.sub) return info.run(common, db_path);
  if (gen.sub) return gen.run(common, problem);
  if (compile.sub) return compile.run(common, problem);
  if (run.sub) return run.run(common, problem);
  if (tune.sub) return tune.run(common, problem, db_path);
  if (precompile.sub) return precompile.run(common, problem, db_path);
  if (query.sub) return query.run(common, problem, db_path);
  if (db.sub) return db.run(common, db_path);
  return report_error(kExitUsage,
                      "expected a subcommand: info, gen, compile, run, tune, precompile, query or "
                      "db (see flashjit --help)");
}
