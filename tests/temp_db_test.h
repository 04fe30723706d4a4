// Shared by the unit and GPU tests: a fixture with a TuningDb in a fresh
// temporary folder, closed and removed with everything in it after the test.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "cache/tuning_db.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

namespace flashjit::testing {

class TempDbTest : public ::testing::Test {
 protected:
  // Opens `tuning.db` in a new folder named after `prefix`; the last step of
  // a SetUp (a failure here fails the test before its body).
  void open_temp_db(const char *prefix) {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory(prefix, dir_));
    // Only this user may write it, whatever the umask: flashjit loads no
    // cubin from a database others can write (cache/db_trust.h).
    llvm::sys::fs::setPermissions(dir_, llvm::sys::fs::owner_all);
    llvm::SmallString<128> path(dir_);
    llvm::sys::path::append(path, "tuning.db");
    auto db = TuningDb::open(path);
    ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
    db_ = std::move(*db);
  }
  void TearDown() override {
    db_.reset();
    if (!dir_.empty()) llvm::sys::fs::remove_directories(dir_);
  }

  llvm::SmallString<128> dir_;
  std::unique_ptr<TuningDb> db_;
};

}  // namespace flashjit::testing
