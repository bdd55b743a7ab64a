# Builds the consumer project against syncmem found (1) in the build tree and
# (2) in an install prefix, and runs it each time; then (3) builds main.cpp
# by hand with the flags `pkg-config --cflags --libs syncmem` gives for the
# prefix, and runs it. With MARKDOWN set, builds the first ```cpp block of
# that file instead, against the build tree only.
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

find_program(PKG_CONFIG pkg-config)
if(NOT PKG_CONFIG)
  message(FATAL_ERROR "pkg-config is not installed (Debian: apt-get install pkg-config)")
endif()
file(GLOB_RECURSE pc_files "${WORK_DIR}/prefix/syncmem.pc")
if(NOT pc_files)
  message(FATAL_ERROR "the install prefix ${WORK_DIR}/prefix has no syncmem.pc")
endif()
list(GET pc_files 0 pc_file)
get_filename_component(pc_dir "${pc_file}" DIRECTORY)
execute_process(COMMAND ${CMAKE_COMMAND} -E env "PKG_CONFIG_PATH=${pc_dir}" "${PKG_CONFIG}" --cflags --libs syncmem
                RESULT_VARIABLE code OUTPUT_VARIABLE flags ERROR_VARIABLE err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT code EQUAL 0)
  message(FATAL_ERROR "pkg-config --cflags --libs syncmem failed (${code}):\n${err}")
endif()
message("pkg-config --cflags --libs syncmem: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
run("build with pkg-config's flags" "${CXX}" -std=c++20 "${SOURCE_DIR}/main.cpp" ${flags}
    -o "${WORK_DIR}/consumer-pkg-config")
# The library folders it names (the CUDA runtime's, say) are where the program finds shared libraries.
set(library_dirs "")
foreach(flag IN LISTS flags)
  if(flag MATCHES "^-L(.+)")
    list(APPEND library_dirs "${CMAKE_MATCH_1}")
  endif()
endforeach()
if(DEFINED ENV{LD_LIBRARY_PATH})
  list(APPEND library_dirs "$ENV{LD_LIBRARY_PATH}")
endif()
list(JOIN library_dirs ":" library_path)
run("run (pkg-config)" ${CMAKE_COMMAND} -E env "LD_LIBRARY_PATH=${library_path}" "${WORK_DIR}/consumer-pkg-config")
