# FindCUDNN: cuDNN under the CUDA toolkit, a CUDNN_ROOT / $CUDNN_ROOT prefix, the system, or a
# Python `nvidia/cudnn` package tree (pip's nvidia-cudnn-cu*). Defines CUDNN::cudnn.
include(${CMAKE_CURRENT_LIST_DIR}/ember_nvidia_python.cmake)
ember_nvidia_python_dirs(cudnn _cudnn_py)
set(_cudnn_hints ${CUDNN_ROOT} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME} ${CUDAToolkit_LIBRARY_ROOT}
                 ${CUDAToolkit_TARGET_DIR} /usr/local/cuda ${_cudnn_py})
find_path(CUDNN_INCLUDE_DIR cudnn.h HINTS ${_cudnn_hints} ${CUDAToolkit_INCLUDE_DIRS}
          PATH_SUFFIXES include targets/x86_64-linux/include)
find_library(CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 libcudnn.so.8 HINTS ${_cudnn_hints}
             PATH_SUFFIXES lib64 lib lib/x64 targets/x86_64-linux/lib)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CUDNN
  REQUIRED_VARS CUDNN_LIBRARY CUDNN_INCLUDE_DIR
  FAIL_MESSAGE "cuDNN not found: looked for cudnn.h and libcudnn under CUDNN_ROOT='${CUDNN_ROOT}', \$CUDNN_ROOT='$ENV{CUDNN_ROOT}', the CUDA toolkit (${CUDAToolkit_LIBRARY_ROOT}), /usr/local/cuda, the system paths and Python nvidia/cudnn packages (${_cudnn_py}). Set -DCUDNN_ROOT=<prefix> or build with -DEMBER_CUDA=OFF")
if(CUDNN_FOUND AND NOT TARGET CUDNN::cudnn)
  add_library(CUDNN::cudnn UNKNOWN IMPORTED)
  set_target_properties(CUDNN::cudnn PROPERTIES IMPORTED_LOCATION "${CUDNN_LIBRARY}"
                                               INTERFACE_INCLUDE_DIRECTORIES "${CUDNN_INCLUDE_DIR}")
endif()
mark_as_advanced(CUDNN_INCLUDE_DIR CUDNN_LIBRARY)
