# `partune search JOB --write-job OUT` writes a job file that `partune estimate` accepts,
# and it is the job the search ranked: its estimated step equals the search's estimate of
# the winner. Invoked by ctest as
#   cmake -DPARTUNE=<binary> -DJOB=<job.yaml> -DOUT=<written.yaml> [-DEXTRA=<arg;arg>] -P search_write_job.cmake
if(NOT DEFINED PARTUNE OR NOT DEFINED JOB OR NOT DEFINED OUT)
  message(FATAL_ERROR "search_write_job.cmake needs -DPARTUNE, -DJOB and -DOUT")
endif()

file(REMOVE "${OUT}")  # a file left by an earlier run must not pass for this one

execute_process(COMMAND "${PARTUNE}" search "${JOB}" --estimator-only --json --write-job "${OUT}" ${EXTRA}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "search exited with '${rc}'\n--- stdout ---\n${out}\n--- stderr ---\n${err}")
endif()
if(NOT EXISTS "${OUT}")
  message(FATAL_ERROR "search exited 0 but did not write ${OUT}\n--- stderr ---\n${err}")
endif()
string(JSON best_config GET "${out}" best configuration)
string(JSON best_step GET "${out}" best estimated_step_time_s)

execute_process(COMMAND "${PARTUNE}" estimate "${OUT}" --json
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 STREQUAL "0")
  file(READ "${OUT}" written)
  message(FATAL_ERROR "estimate of the written job exited with '${rc2}'\n--- stderr ---\n${err2}\n"
                      "--- ${OUT} ---\n${written}")
endif()
string(JSON step GET "${out2}" step_time_s)
# The same job gives the same double, printed the same way.
if(NOT step STREQUAL best_step)
  file(READ "${OUT}" written)
  message(FATAL_ERROR "the written job estimates ${step} s per step; the search estimated its winner "
                      "(${best_config}) at ${best_step} s\n--- ${OUT} ---\n${written}")
endif()
message(STATUS "wrote ${OUT}: ${best_config}, ${step} s per step (estimated) both ways")
