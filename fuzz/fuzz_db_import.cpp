// libFuzzer target: database import (TuningDb::import_yaml). The input is
// written to a file and imported into a fresh database three times:
// refusing cubins, accepting them as a foreign export's (verified, and with
// no verifier here refused), and storing them as they come; the result is
// exported again (signed with an origin key in the work folder). Whatever the file holds, the
// import is a report or one error; never a crash, an escaped yaml-cpp
// exception or an ASan report; and what was imported can be exported.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>

#include "cache/tuning_db.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace {

// One folder per process, on tmpfs when there is one: a fresh database per
// input costs a schema creation, which on disk is dominated by fsync.
struct WorkDir {
  std::string path;
  WorkDir() {
    llvm::SmallString<128> made;
    // A relative prefix lands in the system's temporary folder.
    const char *prefix =
        ::access("/dev/shm", W_OK) == 0 ? "/dev/shm/flashjit-fuzz" : "flashjit-fuzz";
    if (llvm::sys::fs::createUniqueDirectory(prefix, made)) std::abort();
    path = std::string(made);
  }
  ~WorkDir() { llvm::sys::fs::remove_directories(path); }
};

const std::string &work_dir() {
  static const WorkDir dir;
  return dir.path;
}

std::string file_in(const char *name) {
  llvm::SmallString<256> path(work_dir());
  llvm::sys::path::append(path, name);
  return std::string(path);
}

void remove_db(const std::string &db) {
  for (const char *suffix : {"", "-wal", "-shm", "-journal"})
    llvm::sys::fs::remove(db + suffix);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static const std::string input = file_in("input.yaml");
  static const std::string db_path = file_in("fuzz.db");
  static const std::string exported = file_in("export.yaml");
  {
    std::ofstream out(input, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(data), static_cast<std::streamsize>(size));
    if (!out) std::abort();
  }
  remove_db(db_path);
  auto db = flashjit::TuningDb::open(db_path);
  if (!db) std::abort();  // a fresh database in our own folder always opens

  static const bool key_set = [] {
    return setenv("FLASHJIT_ORIGIN_KEY", file_in("origin.key").c_str(), 1) == 0;
  }();
  if (!key_set) std::abort();
  using Verify = flashjit::ImportOptions::Verify;
  for (auto [accept_cubins, verify] : {std::pair{false, Verify::foreign},
                                       std::pair{true, Verify::foreign},
                                       std::pair{true, Verify::never}}) {
    flashjit::ImportOptions options;
    options.accept_cubins = accept_cubins;
    options.verify = verify;
    auto report = (*db)->import_yaml(input, options);
    if (!report) {
      llvm::consumeError(report.takeError());
      return 0;
    }
  }
  if (llvm::Error e = (*db)->export_yaml(exported, /*include_cubins=*/true)) {
    llvm::consumeError(std::move(e));
    std::abort();  // a database we just filled must export
  }
  return 0;
}
