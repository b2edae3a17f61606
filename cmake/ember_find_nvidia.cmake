# Shared body of FindCUDNN.cmake and FindNCCL.cmake: both libraries ship the same three ways (inside
# or beside the CUDA toolkit, as a system package, or as a pip wheel under site-packages/nvidia/<pkg>)
# and are found the same way.
#
# ember_find_nvidia_library(<Pkg> PIP_NAME <name> HEADER <file> NAMES <lib names...>
#                           VERSION_HEADERS <files...> VERSION_MACROS <major> <minor> <patch>
#                           DISPLAY <name for messages>)
# Defines <Pkg>_FOUND, <Pkg>_INCLUDE_DIR, <Pkg>_LIBRARY (cache), <Pkg>_VERSION and the imported
# target <Pkg>::<lowercase pkg>. Search order: <Pkg>_ROOT (CMake variable, then environment),
# $<Pkg>_HOME, the CUDA toolkit (CUDAToolkit_LIBRARY_ROOT, CUDAToolkit_TARGET_DIR, then
# CUDAToolkit_ROOT as variable or environment, else the usual /usr/local/cuda), pip's nvidia/<name>
# folder (ember_nvidia_python.cmake), then the system prefixes. Each root is searched as a prefix:
# <root>/include and <root>/targets/<arch>-linux/include for the header, <root>/lib64, <root>/lib
# and <root>/targets/<arch>-linux/lib for the library.
include_guard(GLOBAL)
include(${CMAKE_CURRENT_LIST_DIR}/ember_nvidia_python.cmake)
include(FindPackageHandleStandardArgs)

macro(ember_find_nvidia_library pkg)
  cmake_parse_arguments(_efn "" "PIP_NAME;HEADER;DISPLAY" "NAMES;VERSION_HEADERS;VERSION_MACROS" ${ARGN})
  ember_nvidia_python_dirs(${_efn_PIP_NAME} _efn_py _efn_pythons)
  # /usr/local/cuda is only a guess at the toolkit: a given CUDAToolkit_ROOT (as FindCUDAToolkit
  # reads it) replaces it, so that a machine whose toolkit lacks the library, or holds another
  # version of it, can point the search elsewhere (tests/tools/find_nvidia.cmake relies on this).
  set(_efn_toolkit ${CUDAToolkit_ROOT} $ENV{CUDAToolkit_ROOT})
  if(NOT _efn_toolkit)
    set(_efn_toolkit /usr/local/cuda)
  endif()
  set(_efn_roots ${${pkg}_ROOT} $ENV{${pkg}_ROOT} $ENV{${pkg}_HOME} ${CUDAToolkit_LIBRARY_ROOT}
                 ${CUDAToolkit_TARGET_DIR} ${_efn_toolkit} ${_efn_py})
  # Toolkits (and conda's CUDA) keep headers and libraries under targets/<arch>-linux/; aarch64
  # servers call that arch sbsa.
  set(_efn_arch_dirs targets/${CMAKE_SYSTEM_PROCESSOR}-linux targets/sbsa-linux)
  list(TRANSFORM _efn_arch_dirs APPEND /include OUTPUT_VARIABLE _efn_arch_include)
  list(TRANSFORM _efn_arch_dirs APPEND /lib OUTPUT_VARIABLE _efn_arch_lib)
  find_path(${pkg}_INCLUDE_DIR ${_efn_HEADER}
            HINTS ${_efn_roots} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include ${_efn_arch_include})
  # Look for the library first under the prefix the header came from, so a header of one install
  # is never paired with the library of another. NAMES_PER_DIR: pip wheels ship only the versioned
  # name (libcudnn.so.9, libnccl.so.2), which must win over an unversioned name found later on.
  set(_efn_lib_hints "")
  if(${pkg}_INCLUDE_DIR)
    get_filename_component(_efn_prefix "${${pkg}_INCLUDE_DIR}" DIRECTORY)
    list(APPEND _efn_lib_hints ${_efn_prefix})
  endif()
  find_library(${pkg}_LIBRARY NAMES ${_efn_NAMES} NAMES_PER_DIR
               HINTS ${_efn_lib_hints} ${_efn_roots}
               PATH_SUFFIXES lib64 lib lib/x64 ${_efn_arch_lib})

  unset(${pkg}_VERSION)
  if(${pkg}_INCLUDE_DIR)
    foreach(_efn_vh IN LISTS _efn_VERSION_HEADERS)
      if(EXISTS "${${pkg}_INCLUDE_DIR}/${_efn_vh}" AND NOT DEFINED ${pkg}_VERSION)
        file(READ "${${pkg}_INCLUDE_DIR}/${_efn_vh}" _efn_text)
        set(_efn_parts "")
        foreach(_efn_macro IN LISTS _efn_VERSION_MACROS)
          if(_efn_text MATCHES "#define[ \t]+${_efn_macro}[ \t]+([0-9]+)")
            list(APPEND _efn_parts ${CMAKE_MATCH_1})
          endif()
        endforeach()
        if(_efn_parts)
          list(JOIN _efn_parts "." ${pkg}_VERSION)
        endif()
      endif()
    endforeach()
  endif()

  string(REPLACE ";" ", " _efn_where "${_efn_roots}")
  string(REPLACE ";" ", " _efn_names "${_efn_NAMES}")
  string(REPLACE ";" ", " _efn_pys "${_efn_pythons}")
  if(NOT _efn_pys)
    set(_efn_pys "none found: set EMBER_PYTHON")
  endif()
  find_package_handle_standard_args(${pkg}
    REQUIRED_VARS ${pkg}_LIBRARY ${pkg}_INCLUDE_DIR
    VERSION_VAR ${pkg}_VERSION
    FAIL_MESSAGE "${_efn_DISPLAY} not found: looked for ${_efn_HEADER} (in include/ or \
targets/<arch>-linux/include/) and a library named one of [${_efn_names}] (in lib64/, lib/ or \
targets/<arch>-linux/lib/) under ${pkg}_ROOT='${${pkg}_ROOT}', environment ${pkg}_ROOT='$ENV{${pkg}_ROOT}' \
and ${pkg}_HOME='$ENV{${pkg}_HOME}', the CUDA toolkit and pip's nvidia/${_efn_PIP_NAME} folders \
[${_efn_where}] (pip folders as seen by Python: ${_efn_pys}), then the system prefixes. Install it, \
pass -D${pkg}_ROOT=<prefix holding include/ and lib/> (pip's site-packages/nvidia/${_efn_PIP_NAME} \
works), -DCUDAToolkit_ROOT=<toolkit holding it>, or configure with -DEMBER_CUDA=OFF.")
  string(TOLOWER ${pkg} _efn_lower)
  if(${pkg}_FOUND AND NOT TARGET ${pkg}::${_efn_lower})
    add_library(${pkg}::${_efn_lower} UNKNOWN IMPORTED)
    set_target_properties(${pkg}::${_efn_lower} PROPERTIES IMPORTED_LOCATION "${${pkg}_LIBRARY}"
                                                         INTERFACE_INCLUDE_DIRECTORIES "${${pkg}_INCLUDE_DIR}")
  endif()
  mark_as_advanced(${pkg}_INCLUDE_DIR ${pkg}_LIBRARY)
endmacro()
