# `syncmem bench --quick` as scripts/run runs it, every suite on this
# machine's device: it must exit 0 with no failed run (a benchmark that cannot
# run here is skipped, saying why), keep stderr out of the table, and report
# counters in the units their names say.
#
#   cmake -DCOMMAND=<syncmem> -DWORK_DIR=<dir> -P check_bench_quick.cmake

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

execute_process(COMMAND "${COMMAND}" bench --quick --json "${WORK_DIR}/quick.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
message("$ syncmem bench --quick\nexit status ${code}\n${out}\nstderr:\n${err}")
if(NOT code STREQUAL "0")
  message(FATAL_ERROR "syncmem bench --quick exited with ${code}")
endif()
if(out MATCHES "failed")
  message(FATAL_ERROR "a run failed (see the output above)")
endif()
if(NOT out MATCHES "syncmem bench, [^\n]*quick run")
  message(FATAL_ERROR "no summary table")
endif()

file(READ "${WORK_DIR}/quick.json" json)
string(JSON run_count LENGTH "${json}" runs)
if(run_count LESS 20)
  message(FATAL_ERROR "only ${run_count} runs: the suites did not all run")
endif()
math(EXPR last "${run_count} - 1")
set(replays 0)
foreach(i RANGE ${last})
  string(JSON name GET "${json}" runs ${i} name)
  string(JSON error ERROR_VARIABLE no_error GET "${json}" runs ${i} error)
  if(NOT no_error)
    message(FATAL_ERROR "${name} failed: ${error}")
  endif()
  # ns_per_op in nanoseconds: an allocation costs more than 1 ns and less than 1 s.
  string(JSON ns ERROR_VARIABLE no_ns GET "${json}" runs ${i} counters ns_per_op)
  if(NOT no_ns)
    math(EXPR replays "${replays} + 1")
    if(ns LESS 1 OR ns GREATER 1000000000)
      message(FATAL_ERROR "${name}: ns_per_op ${ns} is not a time in nanoseconds")
    endif()
  endif()
endforeach()
if(replays EQUAL 0)
  message(FATAL_ERROR "no run reports ns_per_op: the allocator replays did not run")
endif()
message("bench --quick checks passed: ${run_count} runs, ${replays} with ns_per_op")
