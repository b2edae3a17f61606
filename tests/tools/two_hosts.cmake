# Two hosts on a real (virtual) network: tests/tools/two_hosts.sh makes two network namespaces
# joined by a veth pair and runs ember-run --nnodes 2 in each (labels cpu, tools, netns; the case
# is described at the script's top). Skipped (exit 77) where namespaces cannot be made (not root,
# no iproute2). include()d from tests/CMakeLists.txt.
if(NOT TARGET ember-train OR NOT TARGET ember-run)
  return()
endif()
find_program(EMBER_BASH bash)
if(NOT EMBER_BASH)
  message(STATUS "ember: bash not found; tools/two_hosts/* tests not added")
  return()
endif()
foreach(_case link_cut same_as_one_node shaped netem)
  add_test(NAME tools/two_hosts/${_case}
           COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/two_hosts.sh ${_case} $<TARGET_FILE:ember-train>
                   $<TARGET_FILE:ember-run> ${CMAKE_CURRENT_BINARY_DIR}/two-hosts/${_case})
  set_tests_properties(tools/two_hosts/${_case} PROPERTIES LABELS "cpu;tools;netns" TIMEOUT 300
                                                           SKIP_RETURN_CODE 77)
endforeach()
# Timings against a model: alone, so that other tests' load does not skew them.
if(TEST tools/two_hosts/shaped)
  set_tests_properties(tools/two_hosts/shaped PROPERTIES RUN_SERIAL TRUE)
endif()
