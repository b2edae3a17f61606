# FindNCCL: NCCL under the CUDA toolkit, a NCCL_ROOT / $NCCL_ROOT prefix, the system, or a Python
# `nvidia/nccl` package tree (pip's nvidia-nccl-cu*). Defines NCCL::nccl.
include(${CMAKE_CURRENT_LIST_DIR}/ember_nvidia_python.cmake)
ember_nvidia_python_dirs(nccl _nccl_py)
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT}
                ${CUDAToolkit_TARGET_DIR} /usr/local/cuda ${_nccl_py})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include targets/x86_64-linux/include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_nccl_hints}
             PATH_SUFFIXES lib64 lib targets/x86_64-linux/lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL
  REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
  FAIL_MESSAGE "NCCL not found: looked for nccl.h and libnccl under NCCL_ROOT='${NCCL_ROOT}', \$NCCL_ROOT='$ENV{NCCL_ROOT}', the CUDA toolkit (${CUDAToolkit_LIBRARY_ROOT}), /usr/local/cuda, the system paths and Python nvidia/nccl packages (${_nccl_py}). Set -DNCCL_ROOT=<prefix> or build with -DEMBER_CUDA=OFF")
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                                             INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
