# CTest driver (cmake -P) of the find_nvidia/* tests: lays out cuDNN and NCCL in WORK_DIR the way
# one kind of machine holds them, hides the CUDA toolkit (CUDAToolkit_ROOT = an empty folder, and no
# <Pkg>_ROOT / <Pkg>_HOME / CMAKE_PREFIX_PATH in the environment), configures the fixture project
# (CMakeLists.txt here, which checks what FindCUDNN / FindNCCL report) and checks the outcome.
#
#   pip           the GPU machine's layout: a venv whose site-packages holds nvidia/cudnn and
#                 nvidia/nccl with the headers and only the versioned libraries (libcudnn*.so.9,
#                 libnccl.so.2), linked to this machine's real ones; Python found on PATH as in an
#                 activated venv. The fixture's probe is built and run: the libraries must load from
#                 there and report the versions parsed from the headers. SKIPPED (printed, matched
#                 by the test's SKIP_REGULAR_EXPRESSION) without a real cuDNN and NCCL or python3.
#   toolkit_root  made-up headers and library files under <tmp>/cuda/targets/<arch>-linux (conda's
#                 CUDA layout), found through CUDAToolkit_ROOT=<tmp>/cuda; needs nothing installed.
#   missing       nothing of cuDNN, and nvidia/nccl with nccl.h but no library: configuration must
#                 fail, and the messages must name what was searched.
#
# Inputs (-D): MODE, WORK_DIR, FIXTURE_DIR, EMBER_CMAKE_DIR, GENERATOR, MAKE_PROGRAM, CXX_COMPILER,
# REAL_ROOTS (comma-separated prefixes where the ember build found cuDNN/NCCL; searched first for
# the real files of the pip mode).
cmake_minimum_required(VERSION 3.24)
foreach(v MODE WORK_DIR FIXTURE_DIR EMBER_CMAKE_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "find_nvidia/run_test.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT IS_ABSOLUTE "${WORK_DIR}" OR WORK_DIR STREQUAL "/")
  message(FATAL_ERROR "find_nvidia/run_test.cmake: WORK_DIR='${WORK_DIR}' must be an absolute folder of its own")
endif()
if(NOT MODE MATCHES "^(pip|toolkit_root|missing)$")
  message(FATAL_ERROR "find_nvidia/run_test.cmake: MODE='${MODE}', expected pip, toolkit_root or missing")
endif()

# The line the test's SKIP_REGULAR_EXPRESSION matches; ends the script (macro: return() at top level).
macro(skip why)
  message("find_nvidia: SKIPPED: ${why}")
  return()
endmacro()

function(fail what)
  message(FATAL_ERROR "find_nvidia/${MODE}: ${what}")
endfunction()

# Runs a command; fails naming it and its output unless it exits 0. Sets step_output.
function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    fail("${what} failed (exit ${rc})\ncommand: ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "find_nvidia/${MODE}: ${what}: ok")
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

# This script only ever writes under WORK_DIR: an empty variable in a path must not turn a write
# into one on the system's own files (through a link made by another mode, say).
function(check_inside path)
  string(FIND "${path}" "${WORK_DIR}/" at)
  if(NOT at EQUAL 0 OR IS_SYMLINK "${path}")
    fail("refusing to write '${path}': not a plain path under ${WORK_DIR}")
  endif()
endfunction()

function(write_file path text)
  check_inside("${path}")
  file(WRITE "${path}" "${text}")
endfunction()

# Symbolic links in <dest> to every file matching <globs...>, as the pip tree holds them by name.
function(link_into dest)
  check_inside("${dest}")
  file(GLOB files LIST_DIRECTORIES false ${ARGN})
  if(NOT files)
    fail("nothing matches ${ARGN}")
  endif()
  file(MAKE_DIRECTORY "${dest}")
  foreach(f IN LISTS files)
    get_filename_component(name "${f}" NAME)
    file(CREATE_LINK "${f}" "${dest}/${name}" SYMBOLIC)
  endforeach()
endfunction()

include(${EMBER_CMAKE_DIR}/ember_nvidia_python.cmake)

# This machine's real <header> and versioned lib<lib>.so.<major>, from one prefix: sets
# <out>_include (folder) and <out>_lib (file), empty when no prefix holds both.
function(find_real out header lib)
  string(REPLACE "," ";" roots "${REAL_ROOTS}")
  ember_nvidia_python_dirs(${lib} pip_roots)  # a machine whose copies are pip's own
  list(APPEND roots ${pip_roots} $ENV{CUDNN_ROOT} $ENV{CUDNN_HOME} $ENV{NCCL_ROOT} $ENV{NCCL_HOME}
       $ENV{CUDAToolkit_ROOT} $ENV{CUDA_PATH} $ENV{CUDA_HOME} /usr/local/cuda /usr /usr/local)
  foreach(root IN LISTS roots)
    file(GLOB headers "${root}/include/${header}" "${root}/include/*-linux-gnu/${header}"
         "${root}/targets/*-linux/include/${header}")
    set(libs "")
    foreach(dir lib64 lib lib/*-linux-gnu targets/*-linux/lib)
      file(GLOB found "${root}/${dir}/lib${lib}.so.[0-9]" "${root}/${dir}/lib${lib}.so.[0-9][0-9]")
      list(APPEND libs ${found})
    endforeach()
    if(headers AND libs)
      list(GET headers 0 h)
      get_filename_component(h "${h}" DIRECTORY)
      list(GET libs 0 l)
      set(${out}_include "${h}" PARENT_SCOPE)
      set(${out}_lib "${l}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
  set(${out}_include "" PARENT_SCOPE)
  set(${out}_lib "" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}/no-toolkit")
set(configure_args -S "${FIXTURE_DIR}" -B "${WORK_DIR}/build" -G "${GENERATOR}" -DMODE=${MODE}
                   "-DEMBER_CMAKE_DIR=${EMBER_CMAKE_DIR}" "-DCUDAToolkit_ROOT=${WORK_DIR}/no-toolkit")
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()

# A venv sees only its own site-packages (no system or user site), so a machine whose Python
# already has nvidia-* wheels installed cannot leak them into these tests.
set(venv_python "")
if(NOT MODE STREQUAL "toolkit_root")
  find_program(python NAMES python3 NO_CACHE)
  if(python)
    run_step("python3 -m venv" "${python}" -m venv --without-pip "${WORK_DIR}/venv")
    set(venv_python "${WORK_DIR}/venv/bin/python3")
    # No ';' in the script: run_step's ${ARGN} would split the argument there.
    run_step("site-packages of the venv" "${venv_python}" -c "import sysconfig\nprint(sysconfig.get_path('purelib'))")
    string(STRIP "${step_output}" site)
    # Everything below writes under ${site}: it must be the venv's, never a system folder.
    string(FIND "${site}" "${WORK_DIR}/venv/" at)
    if(NOT at EQUAL 0)
      fail("the venv's site-packages is '${site}', not under ${WORK_DIR}/venv")
    endif()
  elseif(MODE STREQUAL "pip")
    skip("no python3 on PATH: the search of pip's nvidia/* folders runs Python")
  else()
    set(site "${WORK_DIR}/site")  # laid out all the same; no Python will look at it
  endif()
endif()

if(MODE STREQUAL "pip")
  find_real(cudnn cudnn.h cudnn)
  find_real(nccl nccl.h nccl)
  if(NOT cudnn_include OR NOT nccl_include)
    skip("this machine has no cuDNN and NCCL to lay out as pip wheels (cudnn.h + libcudnn.so.<N>: "
         "'${cudnn_include}' '${cudnn_lib}'; nccl.h + libnccl.so.<N>: '${nccl_include}' '${nccl_lib}')")
  endif()
  message(STATUS "find_nvidia/pip: real cuDNN ${cudnn_include} ${cudnn_lib}, NCCL ${nccl_include} ${nccl_lib}")
  get_filename_component(cudnn_libdir "${cudnn_lib}" DIRECTORY)
  get_filename_component(nccl_libdir "${nccl_lib}" DIRECTORY)
  link_into("${site}/nvidia/cudnn/include" "${cudnn_include}/cudnn*.h")
  link_into("${site}/nvidia/cudnn/lib" "${cudnn_libdir}/libcudnn*.so.[0-9]" "${cudnn_libdir}/libcudnn*.so.[0-9][0-9]")
  link_into("${site}/nvidia/nccl/include" "${nccl_include}/nccl*.h")
  link_into("${site}/nvidia/nccl/lib" "${nccl_libdir}/libnccl*.so.[0-9]" "${nccl_libdir}/libnccl*.so.[0-9][0-9]")
  get_filename_component(cudnn_soname "${cudnn_lib}" NAME)
  get_filename_component(nccl_soname "${nccl_lib}" NAME)
  list(APPEND configure_args -DPROBE=ON -DCMAKE_BUILD_TYPE=Release
       "-DEXPECT_CUDNN_INCLUDE=${site}/nvidia/cudnn/include" "-DEXPECT_CUDNN_LIBRARY=${site}/nvidia/cudnn/lib/${cudnn_soname}"
       "-DEXPECT_NCCL_INCLUDE=${site}/nvidia/nccl/include" "-DEXPECT_NCCL_LIBRARY=${site}/nvidia/nccl/lib/${nccl_soname}")
  if(CXX_COMPILER)
    list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
  endif()
  # As in an activated venv: the modules' own find_program(python3) must come upon this one.
  set(ENV{PATH} "${WORK_DIR}/venv/bin:$ENV{PATH}")
elseif(MODE STREQUAL "toolkit_root")
  cmake_host_system_information(RESULT arch QUERY OS_PLATFORM)
  set(target "${WORK_DIR}/cuda/targets/${arch}-linux")
  write_file("${target}/include/cudnn_version.h"
       "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 1\n#define CUDNN_PATCHLEVEL 2\n")
  write_file("${target}/include/cudnn.h" "#include \"cudnn_version.h\"\n")
  write_file("${target}/include/nccl.h" "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
  # find_library only needs the files to exist; nothing links against them in this mode.
  write_file("${target}/lib/libcudnn.so.9" "")
  write_file("${target}/lib/libnccl.so.2" "")
  list(REMOVE_ITEM configure_args "-DCUDAToolkit_ROOT=${WORK_DIR}/no-toolkit")
  list(APPEND configure_args "-DCUDAToolkit_ROOT=${WORK_DIR}/cuda"
       "-DEXPECT_CUDNN_INCLUDE=${target}/include" "-DEXPECT_CUDNN_LIBRARY=${target}/lib/libcudnn.so.9"
       -DEXPECT_CUDNN_VERSION=9.1.2
       "-DEXPECT_NCCL_INCLUDE=${target}/include" "-DEXPECT_NCCL_LIBRARY=${target}/lib/libnccl.so.2"
       -DEXPECT_NCCL_VERSION=2.21.5)
else()  # missing
  write_file("${site}/nvidia/nccl/include/nccl.h" "#define NCCL_MAJOR 2\n#define NCCL_MINOR 21\n#define NCCL_PATCH 5\n")
  if(venv_python)
    # The fixture turns off the PATH search, which would otherwise have found Python.
    list(APPEND configure_args "-DEMBER_PYTHON=${venv_python}")
    # A second nvidia/nccl on PYTHONPATH: Python imports from there first, so the search must list
    # it first too (its name sorts after the venv's: a sorted list would not).
    write_file("${WORK_DIR}/zz-pythonpath/nvidia/nccl/include/nccl.h" "#define NCCL_MAJOR 2\n")
  endif()
endif()

# Nothing from the environment may point the search at this machine's own copies (find_real above
# has read them already).
foreach(v CUDNN_ROOT CUDNN_HOME NCCL_ROOT NCCL_HOME CUDAToolkit_ROOT CMAKE_PREFIX_PATH PYTHONPATH PYTHONHOME)
  unset(ENV{${v}})
endforeach()
if(MODE STREQUAL "missing" AND venv_python)
  set(ENV{PYTHONPATH} "${WORK_DIR}/zz-pythonpath")
endif()

if(NOT MODE STREQUAL "missing")
  run_step("configure the fixture" "${CMAKE_COMMAND}" ${configure_args})
  if(MODE STREQUAL "pip")
    run_step("build the probe" "${CMAKE_COMMAND}" --build "${WORK_DIR}/build" --config Release)
    run_step("run the probe" "${WORK_DIR}/build/bin/probe")
    message(STATUS "${step_output}")
  endif()
  return()
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" ${configure_args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  fail("configuring with no cuDNN anywhere succeeded; output:\n${out}\n${err}")
endif()
# CMake wraps messages at 80 columns (at spaces): compare with all whitespace runs made one space.
string(REGEX REPLACE "[ \t\r\n]+" " " text "${out}${err}")
set(expected "cuDNN not found: looked for cudnn.h" "libcudnn.so.9" "${WORK_DIR}/no-toolkit"
             "NCCL not found: looked for nccl.h")
if(venv_python)
  # The header was found in pip's folder; only the library is missing.
  list(APPEND expected "pip folders as seen by Python: ${venv_python}"
       "${WORK_DIR}/zz-pythonpath/nvidia/nccl, ${site}/nvidia/nccl" "(missing: NCCL_LIBRARY)")
else()
  list(APPEND expected "pip folders as seen by Python: none found"
       "(missing: NCCL_LIBRARY NCCL_INCLUDE_DIR)")
endif()
foreach(s IN LISTS expected)
  string(FIND "${text}" "${s}" at)
  if(at EQUAL -1)
    fail("the failed configuration does not say '${s}'; output:\n${out}\n${err}")
  endif()
endforeach()
if(text MATCHES "find_nvidia fixture")
  fail("the fixture reported a failed check; output:\n${out}\n${err}")
endif()
message(STATUS "find_nvidia/missing: configuration failed as expected, naming what it searched")
