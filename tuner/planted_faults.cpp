#include "tuner/planted_faults.h"

#include <cstdlib>

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

namespace flashjit {
namespace {

// Found on NVRTC 13.0 (libnvrtc.so.13): with both wgmma descriptors
// constant zero the compile dies with SIGSEGV inside nvrtcCompileProgram
// (the same descriptors built from a run-time shared address compile; see
// templates/common/sm90.cuh). Non-zero constant descriptors compile.
constexpr const char *kCompilerCrash = R"(
extern "C" __global__ void flashjit_planted_compiler_crash(float *out) {
  float d[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  const unsigned long long desc_a = 0ull, desc_b = 0ull;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7])
      : "l"(desc_a), "l"(desc_b), "r"(1));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int i = 0; i < 8; ++i) out[threadIdx.x * 8 + i] = d[i];
}
)";

// Address 0x10 is in the null page, which no CUDA allocation ever maps.
constexpr const char *kGpuFault = R"(
extern "C" __global__ void flashjit_planted_gpu_fault() {
  volatile unsigned *wild = reinterpret_cast<volatile unsigned *>(0x10ull + threadIdx.x * 4);
  *wild = 0xdeadbeefu;
}
)";

// volatile: the compiler must read the flag on every iteration, so the
// loop cannot be proven infinite and removed.
constexpr const char *kHang = R"(
extern "C" __global__ void flashjit_planted_hang() {
  __shared__ volatile int stop;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  while (stop == 0) {
  }
}
)";

GeneratedSource planted(const char *name, const char *text) {
  GeneratedSource s;
  s.program_name = std::string(name) + ".cu";
  s.entry = name;
  s.entries = {name};
  s.source = text;
  return s;
}

}  // namespace

llvm::Expected<PlantedFaults> parse_planted_faults(llvm::StringRef text) {
  PlantedFaults plants;
  llvm::SmallVector<llvm::StringRef, 4> items;
  text.split(items, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef item : items) {
    auto [kind, index_text] = item.trim().split(':');
    int index = -1;
    if (index_text.getAsInteger(10, index) || index < 0)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("FLASHJIT_TEST_PLANT: '{0}': expected kind:candidate-index", item).str());
    if (kind == "compile_crash")
      plants.compile_crash = index;
    else if (kind == "gpu_fault")
      plants.gpu_fault = index;
    else if (kind == "hang")
      plants.hang = index;
    else
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          llvm::formatv("FLASHJIT_TEST_PLANT: unknown kind '{0}' (compile_crash, gpu_fault, hang)",
                        kind)
              .str());
  }
  return plants;
}

llvm::Expected<PlantedFaults> planted_faults_from_env() {
  const char *env = std::getenv("FLASHJIT_TEST_PLANT");
  if (!env || !*env) return PlantedFaults{};
  return parse_planted_faults(env);
}

GeneratedSource planted_compiler_crash_source() {
  return planted("flashjit_planted_compiler_crash", kCompilerCrash);
}

std::optional<GeneratedSource> planted_kernel_source(const PlantedFaults &plants, int candidate) {
  if (candidate == plants.gpu_fault) return planted("flashjit_planted_gpu_fault", kGpuFault);
  if (candidate == plants.hang) return planted("flashjit_planted_hang", kHang);
  return std::nullopt;
}

}  // namespace flashjit
