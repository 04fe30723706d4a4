// `flashjit db verify`, and the verifier `db import` gives TuningDb: stored
// cubins recompiled in parallel and compared (tuner/cubin_reproduction.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cache/tuning_db.h"
#include "cli/cli_common.h"
#include "tuner/cubin_reproduction.h"
#include "llvm/ADT/ArrayRef.h"

namespace flashjit::cli {

// reproduce_cubin for each row, on `threads` threads (0: one per core), in
// the rows' order.
std::vector<ReproductionResult> reproduce_cubins(llvm::ArrayRef<CubinRecord> rows, int threads);

// ImportOptions::reproduce: "" for a cubin that reproduces, else why it is
// refused ("differs from its recompiled program: ..." or "cannot be
// verified: ...").
std::function<std::vector<std::string>(llvm::ArrayRef<CubinRecord>)> import_verifier(int threads);

// Recompiles every cubin of the database at `path` (or `sample` of them
// chosen at random, when > 0) and prints each verdict; exit 0 only when
// every one reproduced. `repair`: a cubin that differs is replaced by the
// one recompiled here (the program its key names).
int verify_database(const CommonOptions &common, const std::string &path, int sample,
                    int threads, bool repair);

}  // namespace flashjit::cli
