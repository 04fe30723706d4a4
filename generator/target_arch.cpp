#include "generator/target_arch.h"

#include "llvm/Support/FormatVariadic.h"

namespace flashjit {

std::string TargetArch::name() const {
  return llvm::formatv("sm_{0}{1}{2}", major, minor, arch_specific ? "a" : "").str();
}

TargetArch TargetArch::for_device(int major, int minor) {
  // Hopper gets sm_90a so that wgmma/setmaxnreg kernels and the mma.sync
  // family share one target (and one cubin cache key).
  return TargetArch{major, minor, major == 9 && minor == 0};
}

llvm::Expected<TargetArch> TargetArch::parse(llvm::StringRef text) {
  auto fail = [&] {
    return llvm::createStringError(
        llvm::inconvertibleErrorCode(),
        "architecture '%s' not understood: expected sm_XY or sm_XYa with XY >= 80 "
        "(sm_80, sm_86, sm_89, sm_90a)",
        text.str().c_str());
  };
  llvm::StringRef rest = text.trim();
  if (!rest.consume_front("sm_")) return fail();
  bool specific = rest.consume_back("a");
  unsigned value = 0;
  if (rest.size() < 2 || rest.getAsInteger(10, value) || value < 80 || value >= 200) return fail();
  TargetArch arch{static_cast<int>(value / 10), static_cast<int>(value % 10), specific};
  if (specific && arch.sm() < 90)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "architecture '%s': the 'a' suffix exists from sm_90 on",
                                   text.str().c_str());
  return arch;
}

}  // namespace flashjit
