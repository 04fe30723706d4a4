# Everything but libc, libstdc++, zlib, terminfo, libcuda and libnvrtc is
# linked statically, so
# one binary built on Debian 12 runs on the GPU machine (Ubuntu 24.04). libcuda
# and libnvrtc are dlopen'ed at run time: only their headers are needed here.

find_path(FLASHJIT_CUDA_INCLUDE_DIR cuda.h nvrtc.h
  HINTS ENV CUDA_HOME PATHS /usr/local/cuda PATH_SUFFIXES include REQUIRED)

set(FLASHJIT_LLVM_ROOT "/usr/lib/llvm-14" CACHE PATH "LLVM 14 installation")
find_path(FLASHJIT_LLVM_INCLUDE_DIR llvm/Support/Error.h
  HINTS ${FLASHJIT_LLVM_ROOT}/include REQUIRED)
# Not LLVM's exported CMake targets: they drag in libz3.so, which the GPU
# machine does not have and Support's pieces that we link never call.
find_library(FLASHJIT_LLVM_SUPPORT libLLVMSupport.a HINTS ${FLASHJIT_LLVM_ROOT}/lib REQUIRED)
find_library(FLASHJIT_LLVM_DEMANGLE libLLVMDemangle.a HINTS ${FLASHJIT_LLVM_ROOT}/lib REQUIRED)

find_path(FLASHJIT_SQLITE_INCLUDE_DIR sqlite3.h REQUIRED)
find_library(FLASHJIT_SQLITE libsqlite3.a REQUIRED)
find_path(FLASHJIT_YAML_INCLUDE_DIR yaml-cpp/yaml.h REQUIRED)
find_library(FLASHJIT_YAML libyaml-cpp.a REQUIRED)
# zlib and terminfo (for LLVM Support) stay shared: Debian's libtinfo.a is
# not position-independent, and both are in every base image.
find_library(FLASHJIT_ZLIB_SHARED z REQUIRED)
find_library(FLASHJIT_TINFO_SHARED tinfo REQUIRED)
find_package(Threads REQUIRED)

set(FLASHJIT_SYSTEM_INCLUDES ${FLASHJIT_CUDA_INCLUDE_DIR} ${FLASHJIT_LLVM_INCLUDE_DIR}
    ${FLASHJIT_SQLITE_INCLUDE_DIR} ${FLASHJIT_YAML_INCLUDE_DIR})
set(FLASHJIT_STATIC_DEPS ${FLASHJIT_YAML} ${FLASHJIT_SQLITE} ${FLASHJIT_LLVM_SUPPORT}
    ${FLASHJIT_LLVM_DEMANGLE} ${FLASHJIT_ZLIB_SHARED} ${FLASHJIT_TINFO_SHARED} Threads::Threads
    ${CMAKE_DL_LIBS} rt m)
