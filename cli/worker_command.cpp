// `flashjit worker --db=PATH --parent-pid=N`: the tuner's worker process
// (tuner/worker_server.h), started by the tuner itself and not listed in
// --help. It reads requests on stdin and answers on stdout until stdin
// closes.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <string>

#include "cli/commands.h"
#include "tuner/worker_server.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

int run_worker(int argc, char **argv) {
  std::string db_path;
  int parent = 0;
  for (int i = 2; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg.consume_front("--db="))
      db_path = arg.str();
    else if (arg.consume_front("--parent-pid=") && !arg.getAsInteger(10, parent))
      continue;
    else
      return report_error(kExitUsage, "worker: unexpected argument '" + arg + "'");
  }
  if (db_path.empty()) return report_error(kExitUsage, "worker: --db=PATH is required");
  // A worker spinning in a hung kernel never reads stdin again, so it would
  // outlive a tuner killed mid-tune: the kernel ends it with its parent.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (parent > 0 && getppid() != parent) return kExitFailure;  // the parent already left

  // The protocol gets its own descriptor, and stdout goes to stderr: nothing
  // printed by a library can corrupt a reply.
  const int replies = dup(STDOUT_FILENO);
  if (replies < 0 || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
    return report_error(kExitFailure, "worker: cannot set up its reply channel");
  return serve_worker(STDIN_FILENO, replies, db_path);
}

}  // namespace flashjit::cli
