# FLASHJIT_SANITIZE=address,undefined (or any list -fsanitize= takes)
# instruments every target defined after this point: the library, the
# command, the tests. The prebuilt static dependencies (LLVMSupport, SQLite,
# yaml-cpp) stay uninstrumented; ASan still checks every access our code
# makes, and its malloc/free interceptors cover theirs.
#
# FLASHJIT_FUZZ builds fuzz/ with -fsanitize=fuzzer,address and needs clang.

if(FLASHJIT_SANITIZE)
  set(FLASHJIT_SANITIZE_FLAGS -fsanitize=${FLASHJIT_SANITIZE} -fno-omit-frame-pointer)
  if(FLASHJIT_SANITIZE MATCHES "undefined")
    # A UBSan report fails the test instead of scrolling past.
    list(APPEND FLASHJIT_SANITIZE_FLAGS -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${FLASHJIT_SANITIZE_FLAGS})
  add_link_options(-fsanitize=${FLASHJIT_SANITIZE})
  message(STATUS "flashjit: sanitizers ${FLASHJIT_SANITIZE}")
endif()

if(FLASHJIT_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "FLASHJIT_FUZZ needs clang (libFuzzer): configure with "
                        "-DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14")
  endif()
  if(FLASHJIT_SANITIZE)
    message(FATAL_ERROR "FLASHJIT_FUZZ brings its own sanitizers; leave FLASHJIT_SANITIZE empty")
  endif()
  # Everything is instrumented for coverage and ASan; only the fuzz targets
  # themselves link libFuzzer's main.
  add_compile_options(-fsanitize=fuzzer-no-link,address -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address)
endif()
