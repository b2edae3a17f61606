# Picks nvcc's host compiler before enable_language(CUDA).
#
# nvcc 13.0's front end rejects libstdc++ 13's std::string copy constructor in C++20 mode
# ("incomplete type std::iterator_traits<char *>", seen on Ubuntu 24.04 with g++ 13.3 on the
# GPU machine), so a .cu file that includes core/error.h does not compile with g++ 13 as the host
# compiler, while g++ 12 works. This module compiles core/error.h once with nvcc and the C++
# compiler; when that fails it tries g++-12 and g++-11 and uses the first that works as
# CMAKE_CUDA_HOST_COMPILER (same libstdc++ ABI, so the objects link with the C++ compiler's).
# The compiler probed first is the one nvcc would use: `given` (-DCMAKE_CUDA_HOST_COMPILER or
# CUDAHOSTCXX, as they were before check_language(CUDA), which CMake 4 lets fill the cache
# variable), else what check_language found, else the C++ compiler. When it fails and a fallback
# works, the fallback is FORCEd into the cache (and CUDAHOSTCXX cleared for this configure), with
# a warning when the failing one was given explicitly.
function(ember_pick_cuda_host_compiler given)
  if(NOT CMAKE_CUDA_COMPILER)
    return()
  endif()
  if(given)
    set(default_host ${given})
  elseif(CMAKE_CUDA_HOST_COMPILER)
    set(default_host ${CMAKE_CUDA_HOST_COMPILER})
  else()
    set(default_host ${CMAKE_CXX_COMPILER})
  endif()
  set(key "${CMAKE_CUDA_COMPILER}|${default_host}")
  if(EMBER_CUDA_HOST_PROBED STREQUAL key)
    return()  # decided on an earlier configure
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/ember_nvcc_probe)
  file(MAKE_DIRECTORY ${dir})
  # The probe is the one that failed on that machine (nvcc 13.0.88 with g++ 13.3, checked there on
  # 2026-11-27; a copy of ember::Error itself did not fail: its implicit copy constructor is left
  # to the host compiler).
  file(WRITE ${dir}/probe.cu "#include \"${PROJECT_SOURCE_DIR}/core/error.h\"\n"
                             "std::string copy_of(const std::string& s) { return s; }\n")
  set(candidates ${default_host})
  foreach(name g++-12 g++-11)
    find_program(path_${name} ${name})
    if(path_${name})
      list(APPEND candidates ${path_${name}})
    endif()
  endforeach()
  set(first_error "")
  foreach(cxx ${candidates})
    execute_process(COMMAND ${CMAKE_CUDA_COMPILER} -std=c++20 -ccbin ${cxx} -c ${dir}/probe.cu -o ${dir}/probe.o
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(rc EQUAL 0)
      if(cxx STREQUAL default_host)
        message(STATUS "ember: CUDA host compiler ${cxx} (nvcc compiles core/error.h with it)")
      else()
        string(CONCAT why "nvcc cannot compile core/error.h in C++20 with ${default_host} (nvcc 13.0 with libstdc++ 13: "
                "${first_error}); using ${cxx} as the CUDA host compiler")
        if(given)
          message(WARNING "ember: the CUDA host compiler given, ${why}")
        else()
          message(STATUS "ember: ${why}")
        endif()
        set(CMAKE_CUDA_HOST_COMPILER ${cxx} CACHE FILEPATH "nvcc's host compiler (picked by ember)" FORCE)
        set(CMAKE_CUDA_HOST_COMPILER ${cxx} PARENT_SCOPE)  # check_language may have set a normal variable too
        unset(ENV{CUDAHOSTCXX})
      endif()
      set(EMBER_CUDA_HOST_PROBED "${key}" CACHE INTERNAL "")
      return()
    endif()
    if(first_error STREQUAL "")
      string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${err}${out}")
    endif()
  endforeach()
  message(FATAL_ERROR "ember: nvcc (${CMAKE_CUDA_COMPILER}) cannot compile core/error.h in C++20 with the host "
                      "compiler ${default_host}: ${first_error}\nInstall g++-12 (nvcc 13.0 rejects "
                      "libstdc++ 13 here) and configure with -DCMAKE_CUDA_HOST_COMPILER=g++-12, or configure "
                      "with -DEMBER_CUDA=OFF.")
endfunction()
