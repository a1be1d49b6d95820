# `partune search JOB --write-job OUT` (simulating its top candidates), then
# `partune simulate OUT`: the written winner simulates to the search's own figure for it.
# Invoked by ctest as
#   cmake -DPARTUNE=<binary> -DJOB=<job.yaml> -DOUT=<written.yaml> -P search_simulate_best.cmake
if(NOT DEFINED PARTUNE OR NOT DEFINED JOB OR NOT DEFINED OUT)
  message(FATAL_ERROR "search_simulate_best.cmake needs -DPARTUNE, -DJOB and -DOUT")
endif()
file(REMOVE "${OUT}")
execute_process(COMMAND "${PARTUNE}" search "${JOB}" --json --write-job "${OUT}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0" OR NOT EXISTS "${OUT}")
  message(FATAL_ERROR "search exited with '${rc}' (or wrote nothing)\n--- stderr ---\n${err}")
endif()
string(JSON best_config GET "${out}" best configuration)
string(JSON simulated GET "${out}" best simulated)
string(JSON best_step GET "${out}" best step_time_s)
if(NOT simulated STREQUAL "ON")
  message(FATAL_ERROR "the search's winner (${best_config}) was not simulated")
endif()
execute_process(COMMAND "${PARTUNE}" simulate "${OUT}" --json
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 STREQUAL "0")
  message(FATAL_ERROR "simulate of the written job exited with '${rc2}'\n--- stderr ---\n${err2}")
endif()
string(JSON step GET "${out2}" step_time_s)
if(NOT step STREQUAL best_step)
  message(FATAL_ERROR "the written job simulates to ${step} s per step; the search simulated its winner "
                      "(${best_config}) at ${best_step} s")
endif()
message(STATUS "${best_config}: ${step} s per step, simulated both ways")
