# The bundled Slurm job files under a real one-node Slurm (label slurm): tests/tools/slurm.sh starts
# munged, slurmctld and slurmd in the case's own folder with their own ports, submits the job files
# with CPU overrides, and stops everything at the end; its top describes each case. Skipped (exit
# 77) without root, the Debian packages munge/slurmctld/slurmd/slurm-client, or Fashion-MNIST.
# include()d from tests/CMakeLists.txt.
if(NOT TARGET mnist OR NOT TARGET ember-train OR NOT TARGET ember-run)
  return()
endif()
find_program(EMBER_BASH bash)
if(NOT EMBER_BASH)
  message(STATUS "ember: bash not found; tools/slurm/* tests not added")
  return()
endif()
foreach(_case job_files failing_rank preempt_resume two_nodes)
  add_test(NAME tools/slurm/${_case}
           COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/slurm.sh ${_case} $<TARGET_FILE_DIR:mnist> ${PROJECT_SOURCE_DIR}
                   ${CMAKE_CURRENT_BINARY_DIR}/slurm/${_case})
  set_tests_properties(tools/slurm/${_case} PROPERTIES LABELS "cpu;tools;slurm" TIMEOUT 420 SKIP_RETURN_CODE 77)
endforeach()
if(TEST tools/slurm/two_nodes)
  set_tests_properties(tools/slurm/two_nodes PROPERTIES LABELS "cpu;tools;slurm;netns")
endif()
