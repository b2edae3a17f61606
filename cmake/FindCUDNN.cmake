# FindCUDNN: cuDNN (cudnn.h, libcudnn) from CUDNN_ROOT / $CUDNN_ROOT / $CUDNN_HOME, the CUDA toolkit,
# pip's nvidia-cudnn-cu* wheel (site-packages/nvidia/cudnn, which has only libcudnn.so.9) or the
# system. Defines CUDNN_FOUND, CUDNN_VERSION, CUDNN_INCLUDE_DIR, CUDNN_LIBRARY and CUDNN::cudnn.
# The search itself is in ember_find_nvidia.cmake, shared with FindNCCL.
include(${CMAKE_CURRENT_LIST_DIR}/ember_find_nvidia.cmake)
ember_find_nvidia_library(CUDNN DISPLAY cuDNN PIP_NAME cudnn HEADER cudnn.h
                          NAMES cudnn libcudnn.so.9 libcudnn.so.8
                          VERSION_HEADERS cudnn_version.h cudnn.h
                          VERSION_MACROS CUDNN_MAJOR CUDNN_MINOR CUDNN_PATCHLEVEL)
