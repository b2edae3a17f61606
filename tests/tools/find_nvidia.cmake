# CTest entries find_nvidia/{pip,toolkit_root,missing} (label `cmake`) for ember's cuDNN/NCCL find
# modules (cmake/FindCUDNN.cmake, FindNCCL.cmake): each runs find_nvidia/run_test.cmake, which lays
# out a cuDNN/NCCL tree in a temporary folder, hides the CUDA toolkit and configures the fixture
# project find_nvidia/CMakeLists.txt against it. `pip` is the GPU machine's layout (nvidia/cudnn and
# nvidia/nccl in a venv's site-packages, versioned libraries only) and reports itself skipped where
# this machine has no cuDNN/NCCL to lay out or no python3. No GPU and no EMBER_CUDA needed: the
# modules run the same in any build. include()d from tests/CMakeLists.txt; the guard keeps the
# program-test glob over tests/tools/*.cmake from adding the entries twice.
include_guard(GLOBAL)

# Where this build found the real libraries (EMBER_CUDA builds), searched first for pip's files.
set(_find_nvidia_roots "")
foreach(_p CUDNN NCCL)
  if(${_p}_INCLUDE_DIR)
    get_filename_component(_root "${${_p}_INCLUDE_DIR}" DIRECTORY)
    list(APPEND _find_nvidia_roots "${_root}")
  endif()
endforeach()
string(REPLACE ";" "," _find_nvidia_roots "${_find_nvidia_roots}")

foreach(_mode pip toolkit_root missing)
  add_test(NAME find_nvidia/${_mode}
           COMMAND ${CMAKE_COMMAND} -DMODE=${_mode} -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/find_nvidia-${_mode}
                   -DFIXTURE_DIR=${CMAKE_CURRENT_LIST_DIR}/find_nvidia -DEMBER_CMAKE_DIR=${PROJECT_SOURCE_DIR}/cmake
                   -DGENERATOR=${CMAKE_GENERATOR} -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
                   -DCXX_COMPILER=${CMAKE_CXX_COMPILER} "-DREAL_ROOTS=${_find_nvidia_roots}"
                   -P ${CMAKE_CURRENT_LIST_DIR}/find_nvidia/run_test.cmake)
  set_tests_properties(find_nvidia/${_mode} PROPERTIES LABELS cmake TIMEOUT 120
                       SKIP_REGULAR_EXPRESSION "find_nvidia: SKIPPED")
endforeach()
