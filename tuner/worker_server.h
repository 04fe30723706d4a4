// The worker process's side (`flashjit worker`): reads requests
// (tuner/worker_protocol.h) one per line, serves them, and writes one reply
// per line. Compiles go through the database's cubin store, so a cubin made
// here is there for the tuner and the measuring worker; loading, timing and
// checking run an InProcessRunner. After a failure that leaves its CUDA
// context broken (a GPU fault), it replies "fatal" and exits: nothing more
// can run in that context. Planted test faults ($FLASHJIT_TEST_PLANT,
// tuner/planted_faults.h) are read here and nowhere else.
#pragma once

#include <string>

namespace flashjit {

// Serves until `in_fd` reaches end of file; returns the process's exit code
// (0, or 3 after a fatal reply). `db_path` is the tuning database whose
// cubin store the compiles use.
int serve_worker(int in_fd, int out_fd, const std::string &db_path);

}  // namespace flashjit
