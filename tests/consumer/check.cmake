# Builds the consumer project against syncmem found (1) in the build tree and
# (2) in an install prefix, and runs it each time. With MARKDOWN set, builds
# the first ```cpp block of that file instead, against the build tree only.
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${step} failed (${code}):\n${out}\n${err}")
  endif()
  message("${step}: ok\n${out}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release)

if(MARKDOWN)
  file(READ "${MARKDOWN}" text)
  if(NOT text MATCHES "```cpp\n(.*)")
    message(FATAL_ERROR "${MARKDOWN} has no ```cpp block")
  endif()
  set(rest "${CMAKE_MATCH_1}")
  string(FIND "${rest}" "```" end)
  string(SUBSTRING "${rest}" 0 ${end} example)
  file(WRITE "${WORK_DIR}/example.cpp" "${example}")
  list(APPEND common "-DSYNCMEM_CONSUMER_SOURCE=${WORK_DIR}/example.cpp")
endif()

run("configure against the build tree" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/from-build" ${common}
    "-Dsyncmem_DIR=${BUILD_DIR}")
run("build against the build tree" ${CMAKE_COMMAND} --build "${WORK_DIR}/from-build")
run("run (build tree)" "${WORK_DIR}/from-build/consumer")
if(MARKDOWN)
  return()
endif()

run("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run("configure against the install prefix" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/from-install"
    ${common} "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run("build against the install prefix" ${CMAKE_COMMAND} --build "${WORK_DIR}/from-install")
run("run (install prefix)" "${WORK_DIR}/from-install/consumer")
