# Picks nvcc's host compiler before enable_language(CUDA).
#
# nvcc 13.0's front end rejects libstdc++ 13's std::string copy constructor in C++20 mode
# ("incomplete type std::iterator_traits<char *>", seen on Ubuntu 24.04 with g++ 13.3 on the
# GPU machine), so a .cu file that includes core/error.h does not compile with g++ 13 as the host
# compiler, while g++ 12 works. This module compiles core/error.h once with nvcc and the C++
# compiler; when that fails it tries g++-12 and g++-11 and uses the first that works as
# CMAKE_CUDA_HOST_COMPILER (same libstdc++ ABI, so the objects link with the C++ compiler's).
# A CMAKE_CUDA_HOST_COMPILER given by the user is kept as it is.
function(ember_pick_cuda_host_compiler)
  if(CMAKE_CUDA_HOST_COMPILER OR NOT CMAKE_CUDA_COMPILER)
    return()
  endif()
  set(key "${CMAKE_CUDA_COMPILER}|${CMAKE_CXX_COMPILER}")
  if(EMBER_CUDA_HOST_PROBED STREQUAL key)
    return()  # the C++ compiler passed on an earlier configure
  endif()
  set(dir ${CMAKE_BINARY_DIR}/CMakeFiles/ember_nvcc_probe)
  file(MAKE_DIRECTORY ${dir})
  # The probe is the one that failed on that machine (a copy of ember::Error itself did not: its
  # implicit copy constructor is left to the host compiler).
  file(WRITE ${dir}/probe.cu "#include \"${PROJECT_SOURCE_DIR}/core/error.h\"\n"
                             "std::string copy_of(const std::string& s) { return s; }\n")
  set(candidates ${CMAKE_CXX_COMPILER})
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
      if(NOT cxx STREQUAL CMAKE_CXX_COMPILER)
        message(STATUS "ember: nvcc cannot compile core/error.h in C++20 with ${CMAKE_CXX_COMPILER} "
                       "(nvcc 13.0 with libstdc++ 13); using ${cxx} as the CUDA host compiler")
        set(CMAKE_CUDA_HOST_COMPILER ${cxx} CACHE FILEPATH "nvcc's host compiler (picked by ember)")
      else()
        set(EMBER_CUDA_HOST_PROBED "${key}" CACHE INTERNAL "")
      endif()
      return()
    endif()
    if(first_error STREQUAL "")
      string(REGEX MATCH "[^\n]*error[^\n]*" first_error "${err}${out}")
    endif()
  endforeach()
  message(FATAL_ERROR "ember: nvcc (${CMAKE_CUDA_COMPILER}) cannot compile core/error.h in C++20 with the host "
                      "compiler ${CMAKE_CXX_COMPILER}: ${first_error}\nInstall g++-12 (nvcc 13.0 rejects "
                      "libstdc++ 13 here) and configure with -DCMAKE_CUDA_HOST_COMPILER=g++-12, or configure "
                      "with -DEMBER_CUDA=OFF.")
endfunction()
