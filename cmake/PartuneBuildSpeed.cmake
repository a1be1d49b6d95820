# A contributor's wait for the build (issue 54, "Habits"; docs/architecture.md, "Building:
# options and what they save", has the figures):
#   PARTUNE_CCACHE  compile through ccache when it is found
#   PARTUNE_PCH     LibTorch's and Catch2's headers precompiled once per build instead of
#                   parsed again in every translation unit (a backend unit spent most of
#                   its time in torch/torch.h)
#   PARTUNE_WERROR  warnings are errors (CI turns it on: .ci/run)
# Each can be turned off at configure time (-DPARTUNE_PCH=OFF ...) to bypass a compiler
# or cache problem; the results are the same either way.
include_guard(GLOBAL)

option(PARTUNE_CCACHE "Compile through ccache when it is found" ON)
option(PARTUNE_PCH "Precompile LibTorch's and Catch2's headers (cmake/PartuneBuildSpeed.cmake)" ON)
option(PARTUNE_WERROR "Treat compiler warnings as errors (C++ only)" OFF)

if(PARTUNE_WERROR)
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# ccache before any target exists (the launcher is read when a target is created). With
# precompiled headers ccache must be told that the header's __DATE__/__TIME__ and its -D's
# are the compiler's business (sloppiness), and depend mode takes the headers a unit read
# from the compiler's -MD file instead of running the preprocessor a second time on a miss;
# paths under the source tree are hashed relative to the build folder, so two build
# folders in the tree (build/, build-asan/) share the cache.
# A launcher given on the command line (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is left alone.
if(PARTUNE_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(PARTUNE_CCACHE_PROGRAM ccache)
  if(PARTUNE_CCACHE_PROGRAM)
    set(CMAKE_CXX_COMPILER_LAUNCHER ${CMAKE_COMMAND} -E env
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        CCACHE_DEPEND=1 CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} ${PARTUNE_CCACHE_PROGRAM})
    message(STATUS "partune: compiling through ccache (${PARTUNE_CCACHE_PROGRAM})")
  endif()
endif()

# partune_precompile(<target> torch|catch)
#   gives <target>'s C++ units that include the group's headers the group's one precompiled
#   header, built once by a small host target (partune_torch_pch / partune_catch_pch) and
#   reused (REUSE_FROM) by every other target: the compile flags that matter to GCC's check
#   (-std, -O, -fPIC, the LibTorch defines) are the same across them, and -Winvalid-pch,
#   which CMake adds, says so if that ever stops being true. Units that do not include the
#   headers are left without it: a test unit that includes catch.hpp without LibTorch first
#   must not see c10's CHECK macro (tests/backend/test_backend.cpp). CUDA units never get it
#   (C++ only), nor a unit with compile options or definitions of its own.
#   torch: torch/torch.h and the c10d headers the backend and its tests include
#   catch: catch2/catch.hpp (never on tests/test_main.cpp: CATCH_CONFIG_MAIN before it)
function(partune_precompile target group)
  if(NOT PARTUNE_PCH)
    return()
  endif()
  get_target_property(links ${target} LINK_LIBRARIES)
  if(group STREQUAL "torch" AND "partune_test_main" IN_LIST links)
    set(match "#include <torch/torch.h>")  # tests: LibTorch first, #undef CHECK, then Catch
  elseif(group STREQUAL "torch")
    set(match ".")  # the backend's and kernels' units: nearly all read it, many through local headers
  elseif(group STREQUAL "catch")
    set(match "#include <catch2/catch.hpp>")
  else()
    message(FATAL_ERROR "partune_precompile: unknown group '${group}'")
  endif()
  set(host partune_${group}_pch)
  if(NOT TARGET ${host})
    set(host_source ${CMAKE_BINARY_DIR}/pch/${group}_pch_host.cpp)
    file(CONFIGURE OUTPUT ${host_source} CONTENT "// The host of the ${group} precompiled header (cmake/PartuneBuildSpeed.cmake).\n")
    add_library(${host} OBJECT ${host_source})
    if(group STREQUAL "torch")
      target_link_libraries(${host} PRIVATE ${TORCH_LIBRARIES})
      # USE_C10D_GLOO: ProcessGroupGloo.hpp declares nothing without it (backend, kernels).
      target_compile_definitions(${host} PRIVATE USE_C10D_GLOO=1)
      target_compile_options(${host} PRIVATE -Wno-unused-parameter -Wno-sign-compare)
      target_precompile_headers(${host} PRIVATE
        $<$<COMPILE_LANGUAGE:CXX>:<torch/torch.h$<ANGLE-R>>
        $<$<COMPILE_LANGUAGE:CXX>:<torch/csrc/distributed/c10d/ProcessGroupGloo.hpp$<ANGLE-R>>
        $<$<COMPILE_LANGUAGE:CXX>:<torch/csrc/distributed/c10d/TCPStore.hpp$<ANGLE-R>>
        $<$<COMPILE_LANGUAGE:CXX>:<torch/csrc/distributed/c10d/PrefixStore.hpp$<ANGLE-R>>
        $<$<COMPILE_LANGUAGE:CXX>:<torch/csrc/distributed/c10d/HashStore.hpp$<ANGLE-R>>)
    else()
      target_link_libraries(${host} PRIVATE Catch2::Catch2)
      target_precompile_headers(${host} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:<catch2/catch.hpp$<ANGLE-R>>)
    endif()
  endif()
  if(target STREQUAL host)
    return()
  endif()
  target_precompile_headers(${target} REUSE_FROM ${host})
  get_target_property(sources ${target} SOURCES)
  get_target_property(source_dir ${target} SOURCE_DIR)
  foreach(source IN LISTS sources)
    get_filename_component(path ${source} ABSOLUTE BASE_DIR ${source_dir})
    if(NOT path MATCHES "\\.(cpp|cc|cxx)$" OR NOT EXISTS ${path})
      continue()
    endif()
    file(STRINGS ${path} lines REGEX "^#(include|define|undef)")
    string(JOIN "\n" lines ${lines})
    get_source_file_property(own_options ${path} TARGET_DIRECTORY ${target} COMPILE_OPTIONS)
    get_source_file_property(own_definitions ${path} TARGET_DIRECTORY ${target} COMPILE_DEFINITIONS)
    # A unit with options or definitions of its own (row_math.cpp's -O3, nccl_group.cpp's
    # USE_C10D_NCCL) might not match the header's, and a Catch2 unit that undefines a macro
    # before it includes catch.hpp (#undef CHECK, tests/backend/test_window_run.cpp) would
    # undefine Catch's own (the torch header leaves Catch out for that reason): those parse
    # the headers themselves.
    if(NOT lines MATCHES "${match}" OR lines MATCHES "CATCH_CONFIG_MAIN" OR own_options OR own_definitions
       OR (group STREQUAL "catch" AND lines MATCHES "#undef"))
      set_source_files_properties(${path} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
    endif()
  endforeach()
endfunction()

# partune_precompile_tests(<dir>): every test executable defined in <dir> and the folders
# beneath it gets the torch header when it compiles against LibTorch (links
# partune::backend), else the Catch2 one when it is a Catch2 test (links partune_test_main).
function(partune_precompile_tests dir)
  if(NOT PARTUNE_PCH)
    return()
  endif()
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    get_target_property(links ${target} LINK_LIBRARIES)
    set(torch OFF)
    if("partune::backend" IN_LIST links OR "partune_backend" IN_LIST links)
      set(torch ON)
    endif()
    if(NOT type STREQUAL "EXECUTABLE" OR NOT ("partune_test_main" IN_LIST links OR torch))
      continue()
    endif()
    if(torch)  # (rank_probe too)
      partune_precompile(${target} torch)
    else()
      partune_precompile(${target} catch)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(subdir IN LISTS subdirs)
    partune_precompile_tests(${subdir})
  endforeach()
endfunction()
