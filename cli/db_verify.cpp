#include "cli/db_verify.h"

#include <algorithm>
#include <random>

#include "cli/db_common.h"
#include "runtime/nvrtc_compiler.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Threading.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

namespace flashjit::cli {

std::vector<ReproductionResult> reproduce_cubins(llvm::ArrayRef<CubinRecord> rows, int threads) {
  std::vector<ReproductionResult> results(rows.size());
  // NVRTC is thread-safe; each row compiles on its own.
  llvm::ThreadPool pool(llvm::hardware_concurrency(threads > 0 ? unsigned(threads) : 0));
  for (size_t i = 0; i < rows.size(); ++i)
    pool.async([&, i] { results[i] = reproduce_cubin(rows[i]); });
  pool.wait();
  return results;
}

std::function<std::vector<std::string>(llvm::ArrayRef<CubinRecord>)> import_verifier(int threads) {
  return [threads](llvm::ArrayRef<CubinRecord> rows) {
    std::vector<std::string> verdicts;
    for (const ReproductionResult &r : reproduce_cubins(rows, threads))
      verdicts.push_back(r.outcome == Reproduction::reproduced ? std::string()
                         : r.outcome == Reproduction::differs
                             ? "differs from its recompiled program: " + r.detail +
                                   " (changed after it was compiled, or an NVRTC that does not "
                                   "reproduce its own output; calls compile it here)"
                             : "cannot be verified: " + r.detail);
    return verdicts;
  };
}

int verify_database(const CommonOptions &common, const std::string &path, int sample,
                    int threads, bool repair) {
  std::string note;
  auto db = open_existing_database(path, note);
  if (!db) return report_error(kExitFailure, note);
  auto rows = db->list_cubins(/*with_bytes=*/true);
  if (!rows) return report_error(kExitFailure, rows.takeError());
  const size_t stored = rows->size();
  if (sample > 0 && size_t(sample) < rows->size()) {
    std::shuffle(rows->begin(), rows->end(), std::mt19937_64(std::random_device{}()));
    rows->resize(size_t(sample));
    std::sort(rows->begin(), rows->end(),
              [](const CubinRecord &a, const CubinRecord &b) { return a.key < b.key; });
  }
  llvm::raw_ostream &os = common.json ? llvm::errs() : llvm::outs();
  auto nvrtc = nvrtc_version();
  os << llvm::formatv("verifying {0} of {1} cubins of {2} by recompiling them ({3})\n",
                      rows->size(), stored, path,
                      nvrtc ? "NVRTC " + *nvrtc : "no NVRTC here");
  if (!nvrtc) llvm::consumeError(nvrtc.takeError());
  os.flush();

  const std::vector<ReproductionResult> results = reproduce_cubins(*rows, threads);
  int reproduced = 0, differ = 0, unverifiable = 0, repaired = 0;
  llvm::json::Array list;
  for (size_t i = 0; i < rows->size(); ++i) {
    const CubinRecord &row = (*rows)[i];
    const ReproductionResult &r = results[i];
    bool replaced = false;
    if (repair && r.outcome == Reproduction::differs && !r.rebuilt.empty()) {
      CubinRecord fixed = row;
      fixed.bytes = r.rebuilt;
      fixed.blob_sha256.clear();  // the store hashes the new bytes
      if (llvm::Error e = db->put_cubin(fixed))
        return report_error(kExitFailure, std::move(e));
      replaced = true;
      ++repaired;
    }
    (r.outcome == Reproduction::reproduced ? reproduced
     : r.outcome == Reproduction::differs  ? differ
                                           : unverifiable)++;
    const char *label = r.outcome == Reproduction::reproduced ? "reproduced"
                        : r.outcome == Reproduction::differs  ? "DIFFERS"
                                                              : "CANNOT VERIFY";
    if (!common.json)
      os << llvm::formatv("{0,-14} {1} (key {2}): {3}{4}\n", label, row.kernel_id,
                          llvm::StringRef(row.key).take_front(16), r.detail,
                          replaced ? " (replaced by the recompiled cubin)" : "");
    list.push_back(llvm::json::Object{{"key", row.key},
                                      {"kernel_id", row.kernel_id},
                                      {"arch", row.arch},
                                      {"outcome", to_string(r.outcome)},
                                      {"detail", r.detail},
                                      {"replaced", replaced}});
  }
  const std::string total =
      llvm::formatv("{0} reproduced, {1} differ{2}, {3} cannot be verified", reproduced, differ,
                    repaired ? llvm::formatv(" ({0} replaced)", repaired).str() : "",
                    unverifiable)
          .str();
  if (common.json)
    print_json(llvm::json::Object{{"database", path},
                                  {"stored", int64_t(stored)},
                                  {"checked", int64_t(rows->size())},
                                  {"reproduced", reproduced},
                                  {"differ", differ},
                                  {"unverifiable", unverifiable},
                                  {"replaced", repaired},
                                  {"cubins", std::move(list)}});
  else
    os << "total: " << total << "\n";
  if (differ > repaired)
    return report_error(kExitFailure,
                        "db verify: " + total +
                            ": a cubin that differs was changed after it was compiled, and calls "
                            "load it until it is replaced (db verify --repair)");
  if (unverifiable)
    return report_error(kExitFailure, "db verify: " + total +
                                          ": a cubin that cannot be verified is never counted "
                                          "as verified");
  return kExitOk;
}

}  // namespace flashjit::cli
