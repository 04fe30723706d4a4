// A child process that serves one request per line (tuner/worker_protocol.h)
// over pipes: the `flashjit` binary in its hidden `worker` mode, exec'd fresh
// so that it never inherits this process's CUDA context. Whatever a
// candidate does to it (a compiler crash, a GPU fault that poisons its
// context, a kernel that never returns) ends with that process: the request
// fails with the reason, and the next request starts a fresh one.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

namespace flashjit {

// Where the worker binary comes from: `explicit_path` when set, else
// $FLASHJIT_WORKER; empty when neither is (the caller then runs candidates
// in its own process). The CLI passes its own executable.
std::string resolve_worker_binary(llvm::StringRef explicit_path);

// The running executable (/proc/self/exe), for the CLI to name itself.
std::string current_executable();

class WorkerProcess {
 public:
  // `args` follow the binary (e.g. {"worker", "--db", path}). `setup`, when
  // given, is sent first to every process started, with `setup_timeout_s`:
  // a replacement worker is prepared like the one it replaces.
  WorkerProcess(std::string binary, std::vector<std::string> args,
                std::optional<llvm::json::Object> setup = std::nullopt,
                double setup_timeout_s = 120);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess &) = delete;
  WorkerProcess &operator=(const WorkerProcess &) = delete;

  // Sends `request` and waits up to `timeout_s` for its reply. `doing` says
  // what the request is for the messages ("compiling", "timing"). Errors:
  //   the worker's own {"ok":false,"error":...} (when it also says
  //   "fatal", it exits and the next request starts a new one);
  //   "worker killed by SIGSEGV while compiling" (it died);
  //   "timed out after 5 s while timing; the worker was killed".
  // A started worker that fails its setup is an error of this request too.
  llvm::Expected<llvm::json::Object> request(const llvm::json::Object &request,
                                             double timeout_s, llvm::StringRef doing);

  // The reply to `setup` of the worker now running (empty before one).
  const llvm::json::Object &setup_reply() const { return setup_reply_; }
  // Counts processes started: a request sees a fresh worker when this moved.
  int generation() const { return generation_; }
  bool running() const { return pid_ > 0; }
  // Kills the worker now (SIGKILL) and reaps it.
  void stop();

 private:
  llvm::Error start();
  llvm::Expected<llvm::json::Object> exchange(const llvm::json::Object &request,
                                              double timeout_s, llvm::StringRef doing);
  // Why the process ended (it is reaped), e.g. "worker killed by SIGSEGV".
  std::string reap(bool kill_first);

  std::string binary_;
  std::vector<std::string> args_;
  std::optional<llvm::json::Object> setup_;
  llvm::json::Object setup_reply_;
  double setup_timeout_s_;
  pid_t pid_ = -1;
  int to_worker_ = -1;    // its stdin
  int from_worker_ = -1;  // its stdout
  std::string buffered_;  // read past the last reply's newline
  int generation_ = 0;
};

}  // namespace flashjit
