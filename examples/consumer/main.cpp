// A minimal flashjit consumer: links the installed libflashjit.so through
// find_package(flashjit) and calls both the C++ and the C API. It passes null
// pointers on purpose, so it runs anywhere (no GPU, no driver) and shows the
// error a caller gets: a Status naming what is wrong, never a crash.
#include <cstdio>

#include "flashjit/flashjit.h"
#include "flashjit/forward.h"

int main() {
  std::printf("flashjit %s\n", flashjit::version());

  flashjit::Problem problem;
  problem.dtype = flashjit::DType::bf16;
  problem.batch = 2;
  problem.heads_q = problem.heads_kv = 16;
  problem.seqlen_q = problem.seqlen_k = 2048;
  problem.head_dim_qk = problem.head_dim_v = 128;
  problem.mask = flashjit::MaskKind::causal;
  std::printf("problem: %s, %.3g GFLOP\n", flashjit::describe(problem).c_str(),
              problem.forward_flops() / 1e9);

  // Null device pointers: forward must refuse before launching anything.
  flashjit::ForwardArgs args =
      flashjit::ForwardArgs::packed(problem, nullptr, nullptr, nullptr, nullptr, nullptr);
  flashjit::Status status = flashjit::forward(problem, args);
  if (status.ok()) {
    std::printf("error: forward accepted null pointers\n");
    return 1;
  }
  std::printf("C++ API error (expected): %s\n", status.message().c_str());

  flashjit_problem c_problem = {};
  c_problem.dtype = FLASHJIT_BF16;
  c_problem.mask = FLASHJIT_MASK_CAUSAL;
  c_problem.batch = 2;
  c_problem.heads_q = c_problem.heads_kv = 16;
  c_problem.seqlen_q = c_problem.seqlen_k = 2048;
  c_problem.head_dim_qk = c_problem.head_dim_v = 128;
  c_problem.window_left = c_problem.window_right = -1;
  flashjit_forward_args c_args = {};
  if (flashjit_forward(&c_problem, &c_args, nullptr, nullptr) == 0) {
    std::printf("error: flashjit_forward accepted null pointers\n");
    return 1;
  }
  std::printf("C API error (expected): %s\n", flashjit_last_error());
  std::printf("compiles: %llu\n", static_cast<unsigned long long>(flashjit_compile_count()));
  return 0;
}
