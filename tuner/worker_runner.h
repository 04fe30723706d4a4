// The tuner's side of the measuring worker: one `flashjit worker` process
// per tune that loads, times and checks candidates on the GPU, so that CUDA
// is initialised once per tune, not per candidate. When a candidate kills
// it (a GPU fault poisons its context; a hang past the timeout gets it
// killed), the candidate fails with that reason and the next request starts
// a fresh worker, set up like the first, which loads again the candidates
// it is asked about.
#pragma once

#include <map>
#include <string>

#include "tuner/candidate_runner.h"
#include "tuner/worker_process.h"

namespace flashjit {

struct WorkerTimeouts {
  double request_s = 60;  // a warm-up or a timing: a hang is killed after this
  double setup_s = 120;   // a fresh worker: CUDA init and the input sets
  double compile_s = 600; // a compile, or a load or check that may compile
};

class WorkerRunner : public CandidateRunner {
 public:
  // Starts the first worker (`binary` worker --db `db_path`) and sets it up
  // for `pass` of `problem` on `device` (a varlen problem's inputs packed
  // by `packed`'s lengths; `modifiers` as InProcessRunner::make's): an
  // error here is the tune's.
  static llvm::Expected<std::unique_ptr<WorkerRunner>> make(
      const std::string &binary, const std::string &db_path, Pass pass, const Problem &problem,
      const std::optional<PackedBatch> &packed, int device, const WorkerTimeouts &timeouts,
      const TunedModifiers &modifiers = {});

  llvm::Expected<LoadedCandidate> load(int index, const KernelSpec &spec,
                                       const CubinResult &cubin) override;
  llvm::Error warm_up(int index, double ms) override;
  llvm::Expected<Measurement> time(int index, int repeats) override;
  // A worker that dies while checking is the candidate's failure (the why).
  llvm::Expected<std::string> check(int index) override;
  int input_sets() const override { return input_sets_; }
  std::string broken() const override { return ""; }
  // Workers started so far (1 + the replacements).
  int workers_started() const { return process_.generation(); }

 private:
  WorkerRunner(const std::string &binary, const std::string &db_path,
               llvm::json::Object setup, const WorkerTimeouts &timeouts);
  // Loads `index` into the worker now running when it has not yet.
  llvm::Error ensure_loaded(int index);
  llvm::Expected<llvm::json::Object> request(llvm::json::Object request, double timeout_s,
                                             llvm::StringRef doing);

  WorkerProcess process_;
  WorkerTimeouts timeouts_;
  int input_sets_ = 0;
  std::map<int, KernelSpec> specs_;
  std::map<int, int> loaded_in_;  // candidate -> generation of the worker that loaded it
};

}  // namespace flashjit
