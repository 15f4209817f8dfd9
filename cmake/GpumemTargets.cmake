# Helpers that build each library and unit test in up to three variants:
#   plain, "_asan" (AddressSanitizer + UBSan) and "_tsan" (ThreadSanitizer).
# A library's variants link the same variant of its gpumem dependencies, so one ctest
# run covers all of them without a second build tree.

# Warnings as errors. initial-exec TLS: libgpumem.so is dlopen'ed (ctypes, PyTorch's
# pluggable allocator, CUDA_INJECTION64_PATH), and a shared library's thread_locals default
# to a __tls_get_addr call per access: ~10 on each traced allocation. Its ~170 bytes of
# thread_locals fit the static TLS that glibc keeps for libraries loaded later
# (docs/profiler.md, recording cost).
set(GPUMEM_CXX_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Werror
    -ftls-model=initial-exec)
# -O1: sanitized variants check behaviour, not speed, and compile faster.
set(GPUMEM_ASAN_FLAGS -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
set(GPUMEM_TSAN_FLAGS -O1 -fsanitize=thread -fno-omit-frame-pointer)

set(GPUMEM_VARIANTS "")
if(GPUMEM_SANITIZERS)
  set(GPUMEM_VARIANTS asan tsan)
endif()

function(_gpumem_variant_flags target variant)
  target_compile_options(${target} PRIVATE ${GPUMEM_CXX_FLAGS})
  if(variant STREQUAL "asan")
    target_compile_options(${target} PRIVATE ${GPUMEM_ASAN_FLAGS})
    target_link_options(${target} PUBLIC ${GPUMEM_ASAN_FLAGS})
  elseif(variant STREQUAL "tsan")
    target_compile_options(${target} PRIVATE ${GPUMEM_TSAN_FLAGS})
    target_link_options(${target} PUBLIC ${GPUMEM_TSAN_FLAGS})
  endif()
endfunction()

# The requested variants that this build makes (none without GPUMEM_SANITIZERS).
function(_gpumem_enabled_variants out requested)
  set(enabled "")
  foreach(v ${requested})
    if(v IN_LIST GPUMEM_VARIANTS)
      list(APPEND enabled ${v})
    endif()
  endforeach()
  set(${out} ${enabled} PARENT_SCOPE)
endfunction()

# gpumem_library(NAME SOURCES ... [GPUMEM_DEPS gpumem libs] [DEPS external libs]
#                [VARIANTS asan tsan])
function(gpumem_library name)
  cmake_parse_arguments(A "" "" "SOURCES;GPUMEM_DEPS;DEPS;VARIANTS" ${ARGN})
  _gpumem_enabled_variants(variants "${A_VARIANTS}")
  foreach(v "" ${variants})
    set(suffix "")
    if(v)
      set(suffix "_${v}")
    endif()
    add_library(${name}${suffix} STATIC ${A_SOURCES})
    target_include_directories(${name}${suffix} PUBLIC ${PROJECT_SOURCE_DIR})
    _gpumem_variant_flags(${name}${suffix} "${v}")
    foreach(dep ${A_GPUMEM_DEPS})
      target_link_libraries(${name}${suffix} PUBLIC ${dep}${suffix})
    endforeach()
    target_link_libraries(${name}${suffix} PUBLIC ${A_DEPS})
  endforeach()
endfunction()

# gpumem_test(NAME SOURCES ... [GPUMEM_DEPS ...] [DEPS ...] [VARIANTS asan tsan]
#             [LABELS ...] [ARGS ...])
# Registers one ctest per variant; variants get the label "sanitizer".
function(gpumem_test name)
  cmake_parse_arguments(A "" "" "SOURCES;GPUMEM_DEPS;DEPS;VARIANTS;LABELS;ARGS" ${ARGN})
  _gpumem_enabled_variants(variants "${A_VARIANTS}")
  foreach(v "" ${variants})
    set(suffix "")
    set(labels ${A_LABELS})
    if(v)
      set(suffix "_${v}")
      list(APPEND labels sanitizer ${v})
    endif()
    add_executable(${name}${suffix} ${A_SOURCES})
    _gpumem_variant_flags(${name}${suffix} "${v}")
    target_include_directories(${name}${suffix} PRIVATE ${PROJECT_SOURCE_DIR})
    foreach(dep ${A_GPUMEM_DEPS})
      target_link_libraries(${name}${suffix} PRIVATE ${dep}${suffix})
    endforeach()
    target_link_libraries(${name}${suffix} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
    target_compile_definitions(${name}${suffix} PRIVATE
      GPUMEM_TEST_DATA="${GPUMEM_TEST_DATA}")
    add_test(NAME ${name}${suffix} COMMAND ${name}${suffix} ${A_ARGS})
    set_tests_properties(${name}${suffix} PROPERTIES LABELS "${labels}"
      ENVIRONMENT "ASAN_OPTIONS=detect_leaks=1;UBSAN_OPTIONS=print_stacktrace=1;TSAN_OPTIONS=halt_on_error=1")
  endforeach()
endfunction()
