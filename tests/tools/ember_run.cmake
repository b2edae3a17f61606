# Tests of build/bin/ember-run run as a user runs it (label `multiproc`): a Catch2 program,
# tests/parallel/ember_run/test_ember_run.cpp, starts ember-run on the helper ember_run_child (a
# rank that prints its variables, fails, kills itself or waits for a signal) and checks the output
# prefixes, --log-dir, exit statuses, stopping the other ranks and signal forwarding. Loopback
# only; every run is cut off after 20 s. Included from tests/CMakeLists.txt.
if(NOT TARGET ember-run)
  return()
endif()
set(_ember_run_dir ${CMAKE_CURRENT_LIST_DIR}/../parallel/ember_run)
add_executable(ember_run_child ${_ember_run_dir}/ember_run_child.cpp)
target_link_libraries(ember_run_child PRIVATE ember::ember)
add_executable(ember_run_tests $<TARGET_OBJECTS:ember_catch_main> ${_ember_run_dir}/test_ember_run.cpp)
ember_test_program(ember_run_tests)
target_link_libraries(ember_run_tests PRIVATE ember::ember Catch2::Catch2)
target_include_directories(ember_run_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
target_compile_definitions(ember_run_tests PRIVATE EMBER_RUN_PROGRAM="$<TARGET_FILE:ember-run>"
                                                   EMBER_RUN_CHILD="$<TARGET_FILE:ember_run_child>")
add_dependencies(ember_run_tests ember-run ember_run_child)
catch_discover_tests(ember_run_tests TEST_PREFIX "tools/ember_run/" EXTRA_ARGS ${EMBER_CATCH_ARGS} PROPERTIES TIMEOUT 60)
# Catch2's PROPERTIES flattens a list value, so the three labels are set by a CTest include that
# runs after the discovered tests are defined.
set(_ember_run_labels ${CMAKE_CURRENT_BINARY_DIR}/ember_run_tests_labels.cmake)
file(WRITE ${_ember_run_labels} "foreach(_t IN LISTS ember_run_tests_TESTS)
  set_tests_properties(\"\${_t}\" PROPERTIES LABELS \"cpu;tools;multiproc\")
endforeach()
")
set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES ${_ember_run_labels})
