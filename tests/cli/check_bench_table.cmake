# `syncmem bench --from` on results with many alternatives, modes of ours, a
# run of few iterations and replays that count their operations: the table
# fits 120 columns, our modes are a table of their own (not alternatives), the
# rough figure is marked, a replay shows its time per operation, and the JSON
# written counts the modes as ours.
#
#   cmake -DCOMMAND=<syncmem> -DRESULTS=<json> -DWORK_DIR=<dir> -P check_bench_table.cmake

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
execute_process(COMMAND "${COMMAND}" bench --from "${RESULTS}" --json "${WORK_DIR}/again.json"
                RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("exit status ${code}\n${out}\nstderr:\n${err}")
if(NOT code STREQUAL "0")
  message(FATAL_ERROR "syncmem bench --from exited with ${code}")
endif()

string(REPLACE ";" "," flat "${out}")
string(REPLACE "\n" ";" lines "${flat}")
foreach(line IN LISTS lines)
  # ≈, × and µ take 2 or 3 bytes each: count them as the one column they take.
  set(chars "${line}")
  foreach(wide "≈" "×" "µ")
    string(REPLACE "${wide}" "_" chars "${chars}")
  endforeach()
  string(LENGTH "${chars}" width)
  if(width GREATER 120)
    message(FATAL_ERROR "a line of ${width} columns (at most 120): ${line}")
  endif()
endforeach()

function(expect regex what)
  if(NOT out MATCHES "${regex}")
    message(FATAL_ERROR "expected ${what} (${regex})")
  endif()
endfunction()
function(refuse regex what)
  if(out MATCHES "${regex}")
    message(FATAL_ERROR "found ${what} (${regex})")
  endif()
endfunction()

expect("alloc/pair: time per operation, lower is better; ours: caching[;\n]" "the modes left out of 'ours'")
refuse("alloc/pair: time per operation[^\n]*\n([^\n]+\n)*[^\n]*caching_expandable" "a mode of ours among the alternatives")
refuse("alloc/replay: time per operation[^\n]*\n([^\n]+\n)*[^\n]*caching_expandable" "a mode of ours among the alternatives")
expect("alloc/pair, syncmem's modes: caching \\(the default\\)([^\n]*\n)+  512B +caching \\(ours\\) +40.0 ns\n +caching_expandable +130 ns +3.25×"
       "the modes' table")
expect("512B +caching \\(ours\\) +40.0 ns\n +cudaMalloc +70.0 µs +1750×" "the long table of the alternatives")
expect("64slots +≈1.69 ms +374 ns +≈0.000221×" "the figure of 5 iterations and its ratio marked rough")
expect("≈ marks a rough figure" "the note on rough figures")
expect("training +412 ns +618 ns +1.50×" "a replay's time per operation (not the whole trace)")
expect("alloc/replay, counters:\n +parameter +method +peak_ratio +peak_reserved\n +training +caching +1.01 +1.00 GiB"
       "the counters' table")

file(READ "${WORK_DIR}/again.json" json)
string(JSON count LENGTH "${json}" runs)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON name GET "${json}" runs ${i} name)
  string(JSON ours GET "${json}" runs ${i} ours)
  if(name MATCHES "/caching_expandable" AND NOT ours)
    message(FATAL_ERROR "${name}: a mode of ours written with \"ours\": false")
  endif()
endforeach()
message("bench table checks passed")
