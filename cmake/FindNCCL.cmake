# FindNCCL: NCCL (nccl.h, libnccl) from NCCL_ROOT / $NCCL_ROOT / $NCCL_HOME, the CUDA toolkit,
# pip's nvidia-nccl-cu* wheel (site-packages/nvidia/nccl, which has only libnccl.so.2) or the
# system. Defines NCCL_FOUND, NCCL_VERSION, NCCL_INCLUDE_DIR, NCCL_LIBRARY and NCCL::nccl.
# The search itself is in ember_find_nvidia.cmake, shared with FindCUDNN.
include(${CMAKE_CURRENT_LIST_DIR}/ember_find_nvidia.cmake)
ember_find_nvidia_library(NCCL DISPLAY NCCL PIP_NAME nccl HEADER nccl.h
                          NAMES nccl libnccl.so.2
                          VERSION_HEADERS nccl.h
                          VERSION_MACROS NCCL_MAJOR NCCL_MINOR NCCL_PATCH)
