# CTest entries for the examples on several devices and their job files (labels cpu, tools,
# multiproc): tests/tools/example_parallel.sh runs build/bin/mnist and build/bin/cifar with
# --data-parallel, under ember-run and with --precision bf16 / fp16, and runs
# examples/slurm/*.sbatch and examples/htcondor/mnist_job.sh themselves with the scheduler's variables set by hand (a stand-in
# srun starts the tasks on this machine). Its top describes each case. Ranks talk over 127.0.0.1;
# every run is cut off after 150 s. Cases that need Fashion-MNIST are skipped (exit 77) without it.
# include()d from tests/CMakeLists.txt.
if(NOT TARGET mnist OR NOT TARGET cifar OR NOT TARGET ember-run)
  return()
endif()
find_program(EMBER_BASH bash)
if(NOT EMBER_BASH)
  message(STATUS "ember: bash not found; example_parallel/* tests not added")
  return()
endif()
foreach(_case mnist_data_parallel mnist_flags mnist_precision mnist_precision_ember_run mnist_ember_run
              cifar_ember_run slurm_one_node slurm_two_nodes slurm_two_nodes_ember_run htcondor_job_script)
  add_test(NAME example_parallel/${_case}
           COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/example_parallel.sh ${_case} $<TARGET_FILE_DIR:mnist>
                   ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_BINARY_DIR}/example-parallel/${_case})
  set_tests_properties(example_parallel/${_case} PROPERTIES LABELS "cpu;tools;multiproc" TIMEOUT 300
                                                            SKIP_RETURN_CODE 77)
endforeach()
