# Runs one command and checks its exit status and output. Invoked by ctest as
#   cmake -DCMD=<prog;arg;...> -DEXPECT=zero|nonzero|<status>
#         [-DSTDOUT_HAS=<re;re;...>] [-DSTDERR_HAS=<re;re;...>] [-DONE_LINE=ON]
#         [-DSTDOUT_LACKS=<re;...>] [-DSTDERR_LACKS=<re;...>] [-DNO_FILE=<path>] -P run_and_check.cmake
# ONE_LINE: standard error is exactly one line. NO_FILE: that path does not exist after
# the command (no partial output left).
# Each STDOUT_HAS / STDERR_HAS entry is a regular expression that must match somewhere
# in that stream (all of them, not any one as PASS_REGULAR_EXPRESSION would); no
# STDOUT_LACKS / STDERR_LACKS entry may match anywhere in its stream.
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
elseif(EXPECT MATCHES "^[0-9]+$" AND NOT rc STREQUAL EXPECT)
  message(SEND_ERROR "expected exit status ${EXPECT}, got '${rc}'")
  set(failed TRUE)
endif()
if(ONE_LINE AND NOT err MATCHES "^[^\n]+\n$")
  message(SEND_ERROR "expected one line on stderr")
  set(failed TRUE)
endif()
if(DEFINED NO_FILE AND EXISTS "${NO_FILE}")
  message(SEND_ERROR "${NO_FILE} exists after the command")
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
foreach(re IN LISTS STDOUT_LACKS)
  if(out MATCHES "${re}")
    message(SEND_ERROR "stdout matches '${re}'")
    set(failed TRUE)
  endif()
endforeach()
foreach(re IN LISTS STDERR_LACKS)
  if(err MATCHES "${re}")
    message(SEND_ERROR "stderr matches '${re}'")
    set(failed TRUE)
  endif()
endforeach()

if(failed)
  message("command: ${CMD}\nexit status: ${rc}\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
  message(FATAL_ERROR "check failed")
endif()
