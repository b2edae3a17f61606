# The include rule (docs/architecture.md): tools/include_rule checks the real tree; the two
# fixture runs prove the check reports an upward include, an unprefixed one and parallel/'s
# communication half reaching above itself, with file and line.
set(_rule ${CMAKE_CURRENT_LIST_DIR}/include_rule/check_includes.cmake)
add_test(NAME tools/include_rule COMMAND ${CMAKE_COMMAND} -DROOT=${PROJECT_SOURCE_DIR} -P ${_rule})
add_test(NAME tools/include_rule_catches_violations
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_CURRENT_LIST_DIR}/include_rule/bad -P ${_rule})
set_tests_properties(tools/include_rule PROPERTIES LABELS "cpu;tools" TIMEOUT 120)
set_tests_properties(tools/include_rule_catches_violations PROPERTIES LABELS "cpu;tools" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "core/bad.h:3: core/ may not include kernels/.*data/old_style.h:3: 'core/tensor.h' must be included as <ember/core/tensor.h>.*parallel/store.h:4: parallel_comm/ may not include autograd/.*3 violation")
