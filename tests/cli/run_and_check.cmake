# Runs one command and checks its exit status and output. Invoked by ctest as
#   cmake -DCMD=<prog;arg;...> -DEXPECT=zero|nonzero
#         [-DSTDOUT_HAS=<re;re;...>] [-DSTDERR_HAS=<re;re;...>] -P run_and_check.cmake
# Each STDOUT_HAS / STDERR_HAS entry is a regular expression that must match somewhere
# in that stream (all of them, not any one as PASS_REGULAR_EXPRESSION would).
if(NOT DEFINED CMD OR NOT DEFINED EXPECT)
  message(FATAL_ERROR "run_and_check.cmake needs -DCMD=... and -DEXPECT=zero|nonzero")
endif()

execute_process(COMMAND ${CMD}
                RESULT_VARIABLE rc
                OUTPUT_VARIABLE out
                ERROR_VARIABLE err)

set(failed FALSE)
if(EXPECT STREQUAL "zero" AND NOT rc STREQUAL "0")
  message(SEND_ERROR "expected exit status 0, got '${rc}'")
  set(failed TRUE)
elseif(EXPECT STREQUAL "nonzero" AND (rc STREQUAL "0" OR NOT rc MATCHES "^[0-9]+$"))
  # A crash reports a string (e.g. "Segmentation fault"), not a number: also a failure.
  message(SEND_ERROR "expected a non-zero exit status, got '${rc}'")
  set(failed TRUE)
endif()

foreach(re IN LISTS STDOUT_HAS)
  if(NOT out MATCHES "${re}")
    message(SEND_ERROR "stdout does not match '${re}'")
    set(failed TRUE)
  endif()
endforeach()
foreach(re IN LISTS STDERR_HAS)
  if(NOT err MATCHES "${re}")
    message(SEND_ERROR "stderr does not match '${re}'")
    set(failed TRUE)
  endif()
endforeach()

if(failed)
  message("command: ${CMD}\nexit status: ${rc}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
  message(FATAL_ERROR "check failed")
endif()
