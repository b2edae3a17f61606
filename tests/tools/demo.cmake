# CTest entry that runs build/bin/ember-demo as a user would (tests/tools/demo_cli.sh): bad command
# lines exit 2 naming the flag and the value, --help exits 0, --device auto trains. Included from
# tests/CMakeLists.txt.
if(NOT TARGET ember-demo)
  return()
endif()
find_program(EMBER_BASH bash)
if(EMBER_BASH)
  add_test(NAME tools/demo/cli COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/demo_cli.sh $<TARGET_FILE:ember-demo>)
  set_tests_properties(tools/demo/cli PROPERTIES LABELS "cpu;tools" TIMEOUT 120)
endif()
