# A contributor's wait for the build (issue 54, "Habits"; docs/architecture.md, "Building:
# options and what they save", has the figures):
#   PARTUNE_CCACHE    compile through ccache when it is found
#   PARTUNE_PCH       LibTorch's and Catch2's headers precompiled once per build instead of
#                     parsed again in every translation unit (a backend unit spent most of
#                     its time in torch/torch.h)
#   PARTUNE_UNITY     each target's units compiled in batches of PARTUNE_UNITY_BATCH (one
#                     translation unit includes several .cpp files: headers parsed and inline
#                     code generated once per batch); the units whose file-local names clash
#                     compile alone (PARTUNE_UNITY_ALONE below)
#   PARTUNE_TESTS_O1  the test executables' own units at -O1 (the libraries they test keep
#                     the build type's -O3: the work is there)
#   PARTUNE_WERROR    warnings are errors (CI turns it on: .ci/run)
# Each can be turned off at configure time (-DPARTUNE_PCH=OFF ...) to bypass a compiler
# or cache problem; the results are the same either way.
include_guard(GLOBAL)

option(PARTUNE_CCACHE "Compile through ccache when it is found" ON)
option(PARTUNE_PCH "Precompile LibTorch's and Catch2's headers (cmake/PartuneBuildSpeed.cmake)" ON)
option(PARTUNE_UNITY "Compile each target's units in batches (unity build; cmake/PartuneBuildSpeed.cmake)" ON)
set(PARTUNE_UNITY_BATCH 8 CACHE STRING "Units per unity batch (PARTUNE_UNITY)")
option(PARTUNE_TESTS_O1 "Compile the test executables' own units at -O1" ON)
option(PARTUNE_WERROR "Treat compiler warnings as errors (C++ only)" OFF)

# Unity batches for every target created from here on (C++ units; CUDA ones stay alone).
# GCC's -Wsubobject-linkage is meant for headers: a class in an included file with a member
# of an anonymous-namespace type. In a batch every .cpp is an included file, so a unit
# whose class holds such a member (a memo's State) would warn only there.
if(PARTUNE_UNITY)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${PARTUNE_UNITY_BATCH})
  add_compile_options($<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>)
endif()

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
#   Under PARTUNE_UNITY the units left without the header also compile alone (outside the
#   batches), with or without PARTUNE_PCH: in a batch they would see the others' headers and
#   macros first.
function(partune_precompile target group)
  if(NOT PARTUNE_PCH AND NOT PARTUNE_UNITY)
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
  if(PARTUNE_PCH AND NOT TARGET ${host})
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
  if(PARTUNE_PCH)
    target_precompile_headers(${target} REUSE_FROM ${host})
  endif()
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
    # In a unity batch a unit that undefines a macro and then includes the header that
    # defines it (#undef CHECK, then catch.hpp) finds the header already read by the unit
    # before it, and the macro gone: those compile alone too.
    set(alone OFF)
    if(NOT lines MATCHES "${match}" OR lines MATCHES "CATCH_CONFIG_MAIN" OR own_options OR own_definitions
       OR (group STREQUAL "catch" AND lines MATCHES "#undef"))
      set(alone ON)
      set_source_files_properties(${path} TARGET_DIRECTORY ${target} PROPERTIES SKIP_PRECOMPILE_HEADERS ${PARTUNE_PCH})
    endif()
    if(PARTUNE_UNITY AND (alone OR lines MATCHES "#undef"))
      set_source_files_properties(${path} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()

# partune_precompile_tests(<dir>): every test executable defined in <dir> and the folders
# beneath it gets the torch header when it compiles against LibTorch (links
# partune::backend), else the Catch2 one when it is a Catch2 test (links partune_test_main).
function(partune_precompile_tests dir)
  if(NOT PARTUNE_PCH AND NOT PARTUNE_UNITY)
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

# PARTUNE_UNITY_ALONE: the units that compile alone under PARTUNE_UNITY, each because a name
# it keeps to itself (anonymous namespace, static) is also defined, differently or as an
# overload, by another unit of its target: a batch would refuse the second definition, or,
# worse, let a call pick the other file's overload. Found by compiling every target as one
# batch and by listing the file-local names shared within each batch (universal-ctags);
# the first unit of each clash stays in its batch. Paths from the source root. A new unit
# that clashes fails the unity build with "redefinition of ... {anonymous}::name": add it
# here (or give the name to one place).
set(PARTUNE_UNITY_ALONE
  backend/model/src/gpt_model.cpp
  backend/parallel/src/conjugates.cpp
  backend/parallel/src/context_parallel.cpp
  backend/parallel/src/expert_parallel.cpp
  backend/parallel/src/overlapped_linear.cpp
  backend/parallel/src/parallel_linear.cpp
  costmodel/estimate/src/fit_hint.cpp
  kernels/src/gpu_calibrate.cpp
  kernels/src/gpu_profile_file.cpp
  kernels/src/profile_file.cpp
  report/src/html_sweep.cpp
  tests/costmodel/test_bad_input.cpp
  tests/costmodel/test_collective.cpp
  tests/costmodel/test_collective_stack.cpp
  tests/costmodel/test_context_parallel.cpp
  tests/costmodel/test_estimator.cpp
  tests/costmodel/test_gradient_sharding.cpp
  tests/costmodel/test_layer_plan.cpp
  tests/costmodel/test_models_2026.cpp
  tests/costmodel/test_moe.cpp
  tests/costmodel/test_mtp.cpp
  tests/costmodel/test_offload.cpp
  tests/costmodel/test_partial_checkpointing.cpp
  tests/costmodel/test_program.cpp
  tests/costmodel/test_schedule.cpp
  tests/costmodel/test_uneven_chunks.cpp
  tests/search/test_search_robustness.cpp
  tests/search/test_tuner.cpp
  tests/sim/test_overlap_p2p.cpp
  tests/sim/test_own_links.cpp
  tests/sim/test_stage_features.cpp
  tests/sim/test_symmetry_blocks.cpp
  validate/src/candidate_execution.cpp
)

# partune_build_speed_finish(): called by the top-level CMakeLists.txt after its last
# add_subdirectory: the units above leave their batches, and the test executables' own
# units get -O1 (PARTUNE_TESTS_O1; in Release, where the libraries are built at -O3).
function(partune_build_speed_finish)
  # An entry matches the unit of that name anywhere under its top-level folder, so a
  # move within the folder (backend/src/x.cpp -> backend/parallel/src/x.cpp) keeps it.
  set(alone_names)
  foreach(relative IN LISTS PARTUNE_UNITY_ALONE)
    string(REGEX REPLACE "/.*/" "/" short "${relative}")  # <top>/<name>
    list(APPEND alone_names "${short}")
  endforeach()
  set(dirs ${CMAKE_SOURCE_DIR})
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${subdirs})
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(type STREQUAL "INTERFACE_LIBRARY" OR type STREQUAL "UTILITY")
        continue()
      endif()
      get_target_property(sources ${target} SOURCES)
      foreach(source IN LISTS sources)
        get_filename_component(path ${source} ABSOLUTE BASE_DIR ${dir})
        file(RELATIVE_PATH relative ${CMAKE_SOURCE_DIR} ${path})
        string(REGEX REPLACE "/.*/" "/" short "${relative}")
        if(PARTUNE_UNITY AND short IN_LIST alone_names)
          set_source_files_properties(${path} TARGET_DIRECTORY ${target} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
        endif()
      endforeach()
      if(PARTUNE_TESTS_O1 AND dir MATCHES "^${CMAKE_SOURCE_DIR}/tests(/|$)" AND NOT dir MATCHES "/tests/fuzz")
        target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O1>)
      endif()
    endforeach()
  endwhile()
endfunction()
