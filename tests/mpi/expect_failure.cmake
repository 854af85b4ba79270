# SPDX-License-Identifier: MIT
# cmake -DCMD=<arguments separated by |> -DEXPECT=<regex> -DLIMIT=<seconds> -P expect_failure.cmake
# Runs CMD and passes when it ends within LIMIT seconds with a non-zero exit
# status and output matching EXPECT: a failing rank must end the whole job
# with a clear error, neither hang nor pass.
string(REPLACE "|" ";" CMD "${CMD}")
string(TIMESTAMP t0 "%s")
execute_process(COMMAND ${CMD} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT ${LIMIT})
string(TIMESTAMP t1 "%s")
math(EXPR dt "${t1} - ${t0}")
message("${out}${err}")
message("expect_failure: exit status '${rc}' after ${dt} s (limit ${LIMIT} s)")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "expect_failure: the job was still running after ${LIMIT} s (a hang)")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "expect_failure: the job exited with status 0; a rank's failure went unnoticed")
endif()
if(NOT "${out}${err}" MATCHES "${EXPECT}")
  message(FATAL_ERROR "expect_failure: the output does not match '${EXPECT}'")
endif()
message("expect_failure: ok")
