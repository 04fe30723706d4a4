// NVRTC loading and compilation, on the CPU: NVRTC needs no GPU.
#include "runtime/nvrtc_compiler.h"

#include "flashjit/forward.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace flashjit {
namespace {

GeneratedSource tiny_source(std::string body = "out[i] = i * kScale;") {
  // One in-memory header, included by name as the templates are.
  static const TemplateFile kHeaders[] = {
      {"tiny/scale.cuh", "#pragma once\nconstexpr int kScale = 2;\n"}};
  GeneratedSource s;
  s.program_name = "tiny_test.cu";
  s.entry = "tiny_kernel";
  s.source = "#include \"tiny/scale.cuh\"\n"
             "extern \"C\" __global__ void tiny_kernel(int *out, int n) {\n"
             "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
             "  if (i < n) { " + body + " }\n"
             "}\n";
  s.options = {"-std=c++17"};
  s.headers = kHeaders;
  return s;
}

TargetArch arch(int major, int minor, bool specific = false) {
  TargetArch a;
  a.major = major;
  a.minor = minor;
  a.arch_specific = specific;
  return a;
}

bool is_elf(const std::vector<char> &bytes) {
  return bytes.size() > 4 && bytes[0] == 0x7f && bytes[1] == 'E' && bytes[2] == 'L' &&
         bytes[3] == 'F';
}

TEST(NvrtcCompiler, VersionIsMajorDotMinor) {
  auto version = nvrtc_version();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_NE(version->find('.'), std::string::npos) << *version;
  auto library = nvrtc_library();
  ASSERT_TRUE(bool(library)) << llvm::toString(library.takeError());
  EXPECT_NE(library->find("nvrtc"), std::string::npos) << *library;
}

// The background load (the Python package starts it when it loads the
// library): its version is the one every caller then sees, and a fork right
// after it starts gets a child that loads nothing twice and can compile.
TEST(NvrtcCompiler, PreloadThenForkServesBothProcesses) {
  preload_nvrtc();
  preload_nvrtc();  // once a process: returns at once
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto version = nvrtc_version();
    const bool ok = bool(version);
    if (!ok) llvm::consumeError(version.takeError());
    _exit(ok ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  auto version = nvrtc_version();
  ASSERT_TRUE(bool(version)) << llvm::toString(version.takeError());
  EXPECT_NE(version->find('.'), std::string::npos) << *version;
}

TEST(NvrtcCompiler, CompilesToCubinForSm80AndSm90a) {
  for (TargetArch target : {arch(8, 0), arch(9, 0, true)}) {
    auto cubin = compile_to_cubin(tiny_source(), target);
    ASSERT_TRUE(bool(cubin)) << target.name() << ": " << llvm::toString(cubin.takeError());
    EXPECT_TRUE(is_elf(cubin->bytes)) << target.name();
    EXPECT_GT(cubin->bytes.size(), 100u);
    EXPECT_GT(cubin->compile_ms, 0.0);
    EXPECT_EQ(cubin->arch, target);
  }
}

// runtime_stats() says where a first call's time goes: a compile counts once
// and adds its own duration to compile_ns.
TEST(NvrtcCompiler, CompileTimeIsCounted) {
  const RuntimeStats before = runtime_stats();
  auto cubin = compile_to_cubin(tiny_source(), arch(8, 0));
  ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  const RuntimeStats after = runtime_stats();
  EXPECT_EQ(after.compiles, before.compiles + 1);
  const double counted_ms = double(after.compile_ns - before.compile_ns) / 1e6;
  EXPECT_NEAR(counted_ms, cubin->compile_ms, 0.01);
  EXPECT_EQ(after.module_load_ns, before.module_load_ns);  // nothing was loaded
}

TEST(NvrtcCompiler, SameArchitectureInOptionsIsAccepted) {
  GeneratedSource s = tiny_source();
  s.options.push_back("--gpu-architecture=sm_80");
  auto cubin = compile_to_cubin(s, arch(8, 0));
  ASSERT_TRUE(bool(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_TRUE(is_elf(cubin->bytes));
}

TEST(NvrtcCompiler, ConflictingArchitectureIsAnError) {
  GeneratedSource s = tiny_source();
  s.options.push_back("-arch");
  s.options.push_back("sm_86");
  auto cubin = compile_to_cubin(s, arch(8, 0));
  ASSERT_FALSE(bool(cubin));
  std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("sm_86"), std::string::npos) << message;
  EXPECT_NE(message.find("sm_80"), std::string::npos) << message;
}

TEST(NvrtcCompiler, SyntaxErrorCarriesLogOptionsAndProgramName) {
  auto cubin = compile_to_cubin(tiny_source("out[i] = undeclared_flashjit_name;"), arch(8, 0));
  ASSERT_FALSE(bool(cubin));
  std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("tiny_test.cu"), std::string::npos) << message;
  EXPECT_NE(message.find("-std=c++17 --gpu-architecture=sm_80"), std::string::npos) << message;
  // The log itself: NVRTC names the offending identifier.
  EXPECT_NE(message.find("undeclared_flashjit_name"), std::string::npos) << message;
  EXPECT_NE(message.find("error"), std::string::npos) << message;
}

TEST(NvrtcCompiler, ConcurrentCompilesOfSeparateProgramsSucceed) {
  // The tuner compiles candidates on a thread pool.
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &ok] {
      auto cubin = compile_to_cubin(tiny_source(), arch(8, 0));
      ok[t] = cubin && is_elf(cubin->bytes);
      if (!cubin) llvm::consumeError(cubin.takeError());
    });
  for (std::thread &t : threads) t.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 1) << "thread " << t;
}

TEST(NvrtcLoader, ExplicitPathIsTheOnlyCandidate) {
  auto list = detail::nvrtc_search_list("/opt/mine/libnvrtc.so.13", "/usr/local/cuda-x");
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0], "/opt/mine/libnvrtc.so.13");
}

TEST(NvrtcLoader, SearchOrderWithoutExplicitPath) {
  auto list = detail::nvrtc_search_list("", "/opt/cuda");
  std::vector<std::string> expected = {
      "/opt/cuda/lib64/libnvrtc.so.13", "/opt/cuda/lib64/libnvrtc.so",
      "/usr/local/cuda/lib64/libnvrtc.so.13", "libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  EXPECT_EQ(list, expected);
  EXPECT_EQ(detail::nvrtc_search_list(nullptr, nullptr).front(),
            "/usr/local/cuda/lib64/libnvrtc.so.13");
}

// With neither FLASHJIT_NVRTC nor a toolkit, pip's NVRTC beside PyTorch:
// each site-packages the binding passes, then the folder above the library.
TEST(NvrtcLoader, PipNvrtcComesAfterTheToolkit) {
  auto list = detail::nvrtc_search_list(nullptr, nullptr, "/venv/site:/usr/lib/python3/dist",
                                        "/venv/site/flashjit");
  const std::vector<std::string> expected = {
      "/usr/local/cuda/lib64/libnvrtc.so.13",
      "libnvrtc.so.13",
      "libnvrtc.so.12",
      "libnvrtc.so",
      "/venv/site/nvidia/cu13/lib/libnvrtc.so.13",
      "/venv/site/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
      "/usr/lib/python3/dist/nvidia/cu13/lib/libnvrtc.so.13",
      "/usr/lib/python3/dist/nvidia/cuda_nvrtc/lib/libnvrtc.so.12",
      "/venv/site/flashjit/../nvidia/cu13/lib/libnvrtc.so.13",
      "/venv/site/flashjit/../nvidia/cuda_nvrtc/lib/libnvrtc.so.12"};
  EXPECT_EQ(list, expected);
  // An explicit path still stands alone.
  EXPECT_EQ(detail::nvrtc_search_list("/x/libnvrtc.so", nullptr, "/venv/site", "/lib").size(), 1u);
  // The library's own folder is where this test binary lies.
  EXPECT_NE(detail::this_library_dir(), "");
}

TEST(NvrtcLoader, MissingLibraryNamesWhatToDo) {
  auto api = detail::load_nvrtc({"/nonexistent/flashjit/libnvrtc.so.13"});
  ASSERT_FALSE(bool(api));
  std::string message = llvm::toString(api.takeError());
  for (const char *needle : {"cannot load NVRTC", "/nonexistent/flashjit/libnvrtc.so.13",
                             "FLASHJIT_NVRTC", "CUDA_HOME", "nvidia-cuda-toolkit",
                             "cuda-nvrtc-13-0"})
    EXPECT_NE(message.find(needle), std::string::npos) << needle << " not in: " << message;
}

// The process-wide loader reads FLASHJIT_NVRTC once, so the end-to-end check
// runs in a fresh process: the "threadsafe" death-test style re-executes this
// binary for just this test.
TEST(NvrtcLoaderDeathTest, WrongFlashjitNvrtcFailsLoudly) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        setenv("FLASHJIT_NVRTC", "/nonexistent/flashjit/libnvrtc.so.13", 1);
        auto cubin = compile_to_cubin(tiny_source(), arch(8, 0));
        if (cubin) std::exit(0);
        std::fprintf(stderr, "%s\n", llvm::toString(cubin.takeError()).c_str());
        std::exit(3);
      },
      ::testing::ExitedWithCode(3), "FLASHJIT_NVRTC(.|\n)*cuda-nvrtc-13-0");
}

}  // namespace
}  // namespace flashjit
