# Builds the consumer project against syncmem found (1) in the build tree and
# (2) in an install prefix, and runs it each time.
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${step} failed (${code}):\n${out}\n${err}")
  endif()
  message("${step}: ok\n${out}")
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(common -G "${GENERATOR}" "-DCMAKE_CXX_COMPILER=${CXX}" -DCMAKE_BUILD_TYPE=Release)

run("configure against the build tree" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/from-build" ${common}
    "-Dsyncmem_DIR=${BUILD_DIR}")
run("build against the build tree" ${CMAKE_COMMAND} --build "${WORK_DIR}/from-build")
run("run (build tree)" "${WORK_DIR}/from-build/consumer")

run("install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix")
run("configure against the install prefix" ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/from-install"
    ${common} "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix")
run("build against the install prefix" ${CMAKE_COMMAND} --build "${WORK_DIR}/from-install")
run("run (install prefix)" "${WORK_DIR}/from-install/consumer")
