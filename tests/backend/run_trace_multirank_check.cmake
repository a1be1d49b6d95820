# `partune run --trace` of a world of 4 (tensor 2 x pipeline 2): rank 0's file holds every
# rank's executed instructions, named to_string(OpKind) on the simulator's streams, with
# exactly as many complete events as the four programs have instructions per step.
#   cmake -DPARTUNE=<exe> -DJOB=<job.yaml> -DOUT=<trace.json> -P run_trace_multirank_check.cmake
file(REMOVE ${OUT})
execute_process(COMMAND ${PARTUNE} run ${JOB} --steps 1 --set nodes=2 --set tensor_parallel_degree=2
                        --set pipeline_parallel_degree=2 --trace ${OUT} --json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "partune run failed (${rc}): ${err}")
endif()
file(READ ${OUT} trace)
foreach(re "rank 0 compute" "rank 1 compute" "rank 2 compute" "rank 3 compute" "rank 0 comm:tensor"
           "rank 3 p2p\\+copies" "\"name\":\"send_activation\"" "\"name\":\"recv_gradient\""
           "\"name\":\"all_reduce\"" "\"group\":\"tensor\"" "\"group\":\"embedding\"")
  if(NOT trace MATCHES "${re}")
    message(FATAL_ERROR "trace ${OUT} has no match for ${re}")
  endif()
endforeach()
# Every rank's instructions: the JSON report gives rank 0's count; the four programs of
# this layout are the same length two by two (stage 0 and stage 1), so count per rank.
string(REGEX MATCHALL "\"ph\":\"X\"" complete "${trace}")
list(LENGTH complete n)
foreach(rank 0 1 2 3)
  string(REGEX MATCHALL "\"rank\":${rank}}" mine "${trace}")
  list(LENGTH mine k)
  if(k EQUAL 0)
    message(FATAL_ERROR "no event of rank ${rank} in ${OUT}")
  endif()
endforeach()
string(REGEX MATCH "\"instructions\": ([0-9]+)" _ "${out}")
if(n LESS ${CMAKE_MATCH_1})
  message(FATAL_ERROR "the trace has ${n} events, fewer than rank 0's ${CMAKE_MATCH_1} instructions alone")
endif()
