// libFuzzer target: tuning plans (parse_plan). Any text must give a plan or
// one error naming the file; never a crash, an escaped yaml-cpp exception, an
// ASan report, or an entry that bypassed validation.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "generator/kernel_spec.h"
#include "llvm/Support/Error.h"
#include "tuner/plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<flashjit::TuningPlan> plan = flashjit::parse_plan(text, "fuzz.yaml");
  if (!plan) {
    const std::string message = llvm::toString(plan.takeError());
    if (message.rfind("fuzz.yaml", 0) != 0) std::abort();  // every error names the file
    return 0;
  }
  // An accepted entry is a problem the generator accepts too.
  for (const flashjit::PlanEntry &entry : plan->entries) {
    if (llvm::Error e = flashjit::validate_problem(entry.problem)) {
      llvm::consumeError(std::move(e));
      std::abort();
    }
  }
  return 0;
}
