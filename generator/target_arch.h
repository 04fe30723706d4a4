// A compilation target: the SM version and whether arch-specific features
// (sm_90a: wgmma, setmaxnreg) are enabled.
#pragma once

#include <string>

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace flashjit {

struct TargetArch {
  int major = 8;
  int minor = 0;
  bool arch_specific = false;  // the "a" suffix

  int sm() const { return major * 10 + minor; }
  // "sm_90a", the value NVRTC's --gpu-architecture takes.
  std::string name() const;
  // The target flashjit compiles for on a device of this compute capability:
  // sm_90a on Hopper so that one cubin serves both kernel families.
  static TargetArch for_device(int major, int minor);
  static llvm::Expected<TargetArch> parse(llvm::StringRef text);
  bool operator==(const TargetArch &) const = default;
};

}  // namespace flashjit
