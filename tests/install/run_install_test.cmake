# CTest driver (cmake -P) for the `install` tests: installs the build into a temporary prefix, moves
# the prefix (the package must be relocatable), checks the installed tree, then configures, builds
# and runs tests/install/consumer against it. With -DMODE=add_subdirectory it instead configures the
# consumer with add_subdirectory(<source tree>) and compiles its main.cpp (linking would rebuild the
# whole library), which checks that ember::ember and <ember/ember.h> also work that way.
#
# Inputs (-D): BUILD_DIR, SOURCE_DIR, WORK_DIR, GENERATOR, CXX_COMPILER, CONFIG, MODE, HINTS_FILE (an
# initial-cache script carrying the build's CMAKE_PREFIX_PATH and ZLIB_ROOT), FOLDERS (the library
# folders, comma-separated, whose headers must all be installed), SANITIZE_FLAGS (the build's
# -fsanitize flags, space-separated; the consumer is compiled and linked with them too).
cmake_minimum_required(VERSION 3.24)
foreach(v BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run_install_test.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT CONFIG)
  set(CONFIG Release)
endif()

function(run_step what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "install test: ${what} failed (exit ${rc})\ncommand: ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "install test: ${what}: ok")
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
set(consumer_args -G "${GENERATOR}" -DCMAKE_BUILD_TYPE=${CONFIG})
if(CXX_COMPILER)
  list(APPEND consumer_args -DCMAKE_CXX_COMPILER=${CXX_COMPILER})
endif()
if(SANITIZE_FLAGS)
  # An ASan/TSan libember aborts in a program whose runtime list does not start with the sanitizer's.
  list(APPEND consumer_args "-DCMAKE_CXX_FLAGS=${SANITIZE_FLAGS}" "-DCMAKE_EXE_LINKER_FLAGS=${SANITIZE_FLAGS}")
endif()

if(MODE STREQUAL "add_subdirectory")
  # ember's own dependencies (zlib, BLAS) are found where this build found them. The find_package
  # mode gets no such hints: an installed ember must need nothing but itself.
  set(hints "")
  if(HINTS_FILE)
    set(hints -C ${HINTS_FILE})
  endif()
  run_step("configure the consumer with add_subdirectory(ember)"
           ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer"
           ${consumer_args} -DEMBER_SOURCE_DIR=${SOURCE_DIR} -DEMBER_CUDA=OFF ${hints})
  # The object file alone: Ninja names it by path, the Makefile generators by source file.
  set(object main.cpp.o)
  if(GENERATOR MATCHES "Ninja")
    set(object CMakeFiles/ember_consumer.dir/main.cpp.o)
  endif()
  run_step("compile the consumer's main.cpp against the source tree"
           ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer" --target ${object})
  return()
endif()

# 1. Install, then move the prefix: nothing may point back at the first location.
run_step("cmake --install" ${CMAKE_COMMAND} --install "${BUILD_DIR}" --prefix "${WORK_DIR}/prefix" --config ${CONFIG})
file(RENAME "${WORK_DIR}/prefix" "${WORK_DIR}/moved")
set(P "${WORK_DIR}/moved")

# 2. The installed tree has what the README promises.
file(GLOB_RECURSE config "${P}/ember-config.cmake")
if(NOT config)
  message(FATAL_ERROR "install test: no ember-config.cmake under ${P}")
endif()
get_filename_component(libdir "${config}" DIRECTORY)   # <libdir>/cmake/ember
get_filename_component(libdir "${libdir}/../.." ABSOLUTE)
# Every header of every library folder (FOLDERS, comma-separated) lands under include/ember/, but
# the internal ones (cmake/ember_internal_headers.cmake), which must not.
include("${SOURCE_DIR}/cmake/ember_internal_headers.cmake")
set(headers include/ember/ember.h)
string(REPLACE "," ";" folders "${FOLDERS}")
foreach(dir IN LISTS folders)
  file(GLOB_RECURSE hs RELATIVE "${SOURCE_DIR}" "${SOURCE_DIR}/${dir}/*.h" "${SOURCE_DIR}/${dir}/*.cuh")
  list(REMOVE_ITEM hs ${EMBER_INTERNAL_HEADERS})
  foreach(h IN LISTS hs)
    list(APPEND headers include/ember/${h})
  endforeach()
endforeach()
foreach(h IN LISTS EMBER_INTERNAL_HEADERS)
  if(EXISTS "${P}/include/ember/${h}")
    message(FATAL_ERROR "install test: the internal header ${h} was installed")
  endif()
endforeach()
list(LENGTH headers n_headers)
if(n_headers LESS 2)
  message(FATAL_ERROR "install test: no library headers found under ${SOURCE_DIR} for folders '${FOLDERS}'")
endif()
foreach(f IN LISTS headers)
  if(NOT EXISTS "${P}/${f}")
    message(FATAL_ERROR "install test: ${P}/${f} was not installed")
  endif()
endforeach()
message(STATUS "install test: all ${n_headers} headers installed")
# An installed header that includes an internal one would not compile for a user.
file(GLOB_RECURSE installed_headers "${P}/include/ember/*.h" "${P}/include/ember/*.cuh")
foreach(f IN LISTS installed_headers)
  file(STRINGS "${f}" lines REGEX "#[ \t]*include[ \t]*<ember/")
  foreach(line IN LISTS lines)
    foreach(h IN LISTS EMBER_INTERNAL_HEADERS)
      string(FIND "${line}" "<ember/${h}>" at)
      if(NOT at EQUAL -1)
        message(FATAL_ERROR "install test: ${f} includes the internal header ${h}, which is not installed")
      endif()
    endforeach()
  endforeach()
endforeach()
foreach(f cmake/ember/ember-config.cmake cmake/ember/ember-config-version.cmake cmake/ember/emberTargets.cmake)
  if(NOT EXISTS "${libdir}/${f}")
    message(FATAL_ERROR "install test: ${libdir}/${f} was not installed")
  endif()
endforeach()
file(GLOB libs "${libdir}/libember.so*" "${libdir}/libember*.dylib" "${P}/bin/ember*.dll")
if(NOT libs)
  message(FATAL_ERROR "install test: no shared library libember under ${libdir}")
endif()
# The library's RUNPATH may name dependency folders, never the build tree. Source locations the
# compiler records for diagnostics are no dependency and are let through: UBSan's and the debug
# info's (RelWithDebInfo, Debug, sanitizer trees; clang's also in lambda type names) name headers
# through the build tree's include-root/ link, the generated sources, and the compilation directory.
foreach(lib IN LISTS libs)
  if(NOT IS_SYMLINK "${lib}")
    file(STRINGS "${lib}" all_hits REGEX "${BUILD_DIR}")
    set(hits "")
    foreach(h IN LISTS all_hits)
      string(REPLACE "${BUILD_DIR}/include-root/" "" rest "${h}")
      string(REPLACE "${BUILD_DIR}/generated" "" rest "${rest}")
      string(FIND "${rest}" "${BUILD_DIR}" at)
      if(NOT rest STREQUAL BUILD_DIR AND NOT at EQUAL -1)
        list(APPEND hits "${h}")
      endif()
    endforeach()
    if(hits)
      message(FATAL_ERROR "install test: ${lib} still names the build tree (${hits})")
    endif()
  endif()
endforeach()
file(GLOB cmake_files "${libdir}/cmake/ember/*.cmake")
foreach(f IN LISTS cmake_files)
  file(READ "${f}" text)
  foreach(bad "${BUILD_DIR}" "${SOURCE_DIR}" "${WORK_DIR}/prefix")
    string(FIND "${text}" "${bad}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "install test: ${f} names ${bad}: the package is not relocatable")
    endif()
  endforeach()
  # cuDNN and NCCL are private to the shared library: consumers must not be asked to find them.
  if(text MATCHES "CUDNN::|NCCL::|find_dependency\\(CUDNN|find_dependency\\(NCCL")
    message(FATAL_ERROR "install test: ${f} makes consumers depend on cuDNN/NCCL")
  endif()
endforeach()

# 3. A separate project finds it, builds and runs.
run_step("configure the consumer with find_package(ember)"
         ${CMAKE_COMMAND} -S "${SOURCE_DIR}/tests/install/consumer" -B "${WORK_DIR}/consumer"
         ${consumer_args} -DCMAKE_PREFIX_PATH=${P} -DCMAKE_FIND_PACKAGE_NO_PACKAGE_REGISTRY=ON)
string(FIND "${step_output}" "from ${libdir}/cmake/ember" at)
if(at EQUAL -1)
  message(FATAL_ERROR "install test: the consumer did not take ember from the moved prefix:\n${step_output}")
endif()
run_step("build the consumer" ${CMAKE_COMMAND} --build "${WORK_DIR}/consumer" --config ${CONFIG})
file(GLOB_RECURSE exe "${WORK_DIR}/consumer/ember_consumer" "${WORK_DIR}/consumer/ember_consumer.exe")
run_step("run the consumer" ${exe})
message(STATUS "${step_output}")

# 4. The installed program finds the installed library from its own location ($ORIGIN RUNPATH).
file(GLOB demo "${P}/bin/ember-demo" "${P}/bin/ember-demo.exe")
if(demo)
  run_step("run the installed ember-demo" ${demo} --steps 5 --device cpu)
endif()
