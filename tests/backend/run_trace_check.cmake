# Runs `partune run ... --trace FILE` and checks the trace: one complete event per
# executed instruction, named to_string(OpKind), with the args of architecture.md 2.6.
#   cmake -DPARTUNE=<exe> -DJOB=<job.yaml> -DOUT=<trace.json> -P run_trace_check.cmake
file(REMOVE ${OUT})
execute_process(COMMAND ${PARTUNE} run ${JOB} --steps 1 --set activation_checkpointing=full --trace ${OUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc STREQUAL "0")
  message(FATAL_ERROR "partune run failed (${rc}): ${err}")
endif()
file(READ ${OUT} trace)
foreach(re "\"name\":\"forward\"" "\"name\":\"recompute\"" "\"name\":\"backward\"" "\"name\":\"optimizer_step\""
           "\"args\":{\"chunk\":0,\"layer\":1,\"microbatch\":3,\"rank\":0}" "rank 0 compute")
  if(NOT trace MATCHES "${re}")
    message(FATAL_ERROR "trace ${OUT} has no match for ${re}")
  endif()
endforeach()
# 4 micro-batches x 2 layers x (forward, recompute, backward) + the optimizer step.
string(REGEX MATCHALL "\"ph\":\"X\"" complete "${trace}")
list(LENGTH complete n)
if(NOT n EQUAL 25)
  message(FATAL_ERROR "expected 25 executed instructions in the trace, found ${n}")
endif()
