# partune_catch_tests(<target> LABELS <label>... [TIMEOUT <seconds>] [PROPERTIES <name> <value>...])
#   catch_discover_tests with several labels per test (ctest -L multirank): Catch2's
#   PROPERTIES flattens "a;b" into separate arguments of its set_tests_properties, so only
#   the first label stuck (and the second was read as a property name). The labels are set
#   instead by a file ctest includes after Catch2's, over the names Catch2 discovered
#   (its TEST_LIST variable, <target>_TESTS).
include_guard(GLOBAL)
include(Catch)

function(partune_catch_tests target)
  cmake_parse_arguments(arg "" "TIMEOUT" "LABELS;PROPERTIES" ${ARGN})
  if(arg_UNPARSED_ARGUMENTS OR NOT arg_LABELS)
    message(FATAL_ERROR "partune_catch_tests(${target}): LABELS <label>... [TIMEOUT s] [PROPERTIES ...]")
  endif()
  set(properties ${arg_PROPERTIES})
  if(arg_TIMEOUT)
    list(APPEND properties TIMEOUT ${arg_TIMEOUT})
  endif()
  catch_discover_tests(${target} TEST_LIST ${target}_TESTS PROPERTIES ${properties})
  set(labels_file ${CMAKE_CURRENT_BINARY_DIR}/${target}_labels.cmake)
  file(WRITE ${labels_file}
       "if(${target}_TESTS)\n  set_tests_properties(\${${target}_TESTS} PROPERTIES LABELS \"${arg_LABELS}\")\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${labels_file})
endfunction()
