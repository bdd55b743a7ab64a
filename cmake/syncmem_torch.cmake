# Finds libtorch inside the torch Python package, for benchmarking PyTorch's
# CUDA caching allocator beside syncmem's (bench/torch/torch_bridge.cpp).
#
#   syncmem_find_torch(<prefix>)
#
# sets <prefix>_FOUND, and when found <prefix>_DIR (the package directory),
# <prefix>_INCLUDE_DIRS, <prefix>_LIBRARIES (libc10, libc10_cuda), <prefix>_ABI
# (torch._C._GLIBCXX_USE_CXX11_ABI as 0 or 1) and <prefix>_VERSION; when not,
# <prefix>_WHY says why. The interpreter is SYNCMEM_TORCH_PYTHON (default:
# python3 on PATH).

set(SYNCMEM_TORCH_PYTHON "" CACHE FILEPATH "The Python interpreter whose torch package the benchmarks use (default: python3)")

function(syncmem_find_torch prefix)
  set(${prefix}_FOUND FALSE PARENT_SCOPE)
  set(python "${SYNCMEM_TORCH_PYTHON}")
  if(NOT python)
    find_program(_syncmem_python3 NAMES python3)
    set(python "${_syncmem_python3}")
  endif()
  if(NOT python)
    set(${prefix}_WHY "no python3 interpreter on PATH (set SYNCMEM_TORCH_PYTHON)" PARENT_SCOPE)
    return()
  endif()
  # One line per fact; the marker keeps stray output of the import apart.
  set(_script [=[
import os, sys
import torch
print("SYNCMEM_TORCH_DIR=" + os.path.dirname(torch.__file__))
print("SYNCMEM_TORCH_ABI=" + str(int(bool(torch._C._GLIBCXX_USE_CXX11_ABI))))
print("SYNCMEM_TORCH_VERSION=" + str(torch.__version__))
print("SYNCMEM_TORCH_CUDA=" + str(torch.version.cuda or ""))
]=])
  execute_process(COMMAND "${python}" -c "${_script}"
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 120)
  if(NOT _rc EQUAL 0)
    string(STRIP "${_err}" _err)
    string(REGEX REPLACE ".*\n" "" _last "${_err}")  # the exception line
    if(NOT _last)
      set(_last "exit status ${_rc}")
    endif()
    set(${prefix}_WHY "${python} cannot import torch: ${_last}" PARENT_SCOPE)
    return()
  endif()
  foreach(_key DIR ABI VERSION CUDA)
    if(_out MATCHES "SYNCMEM_TORCH_${_key}=([^\n]*)")
      set(_${_key} "${CMAKE_MATCH_1}")
    else()
      set(${prefix}_WHY "${python} imported torch but did not report its ${_key}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  if(NOT _CUDA)
    set(${prefix}_WHY "torch ${_VERSION} in ${_DIR} is built without CUDA" PARENT_SCOPE)
    return()
  endif()
  set(_includes "${_DIR}/include" "${_DIR}/include/torch/csrc/api/include")
  set(_libraries "${_DIR}/lib/libc10.so" "${_DIR}/lib/libc10_cuda.so")
  foreach(_file "${_DIR}/include/c10/cuda/CUDACachingAllocator.h" ${_libraries})
    if(NOT EXISTS "${_file}")
      set(${prefix}_WHY "torch ${_VERSION} in ${_DIR} lacks ${_file} (a wheel without C++ headers or libraries?)"
          PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${prefix}_FOUND TRUE PARENT_SCOPE)
  set(${prefix}_DIR "${_DIR}" PARENT_SCOPE)
  set(${prefix}_INCLUDE_DIRS "${_includes}" PARENT_SCOPE)
  set(${prefix}_LIBRARIES "${_libraries}" PARENT_SCOPE)
  set(${prefix}_ABI "${_ABI}" PARENT_SCOPE)
  set(${prefix}_VERSION "${_VERSION} (CUDA ${_CUDA})" PARENT_SCOPE)
  set(${prefix}_VERSION_STRING "${_VERSION}" PARENT_SCOPE)
endfunction()
