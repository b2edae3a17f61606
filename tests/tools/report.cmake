# CTest entries that run build/bin/ember-report on the run directories in tests/train/fixtures/runs
# as a user would, through tests/tools/report/check_report.cmake (which checks the exit status,
# stdout/stderr and the files written). Included from tests/CMakeLists.txt.
get_filename_component(_report_runs ${CMAKE_CURRENT_LIST_DIR}/../train/fixtures/runs ABSOLUTE)
set(_report_out ${CMAKE_CURRENT_BINARY_DIR}/report-out)
# ok: four runs (1, 2 and 4 devices, one without summary.json) -> table with speedups, four files.
# default_out: no --out writes report/ in the working directory.
# bad_run: a malformed metrics.jsonl -> exit 1 naming the file and line, nothing written.
# missing_dir: a run directory that does not exist -> exit 1 naming it.
# usage: no run directories, an unknown flag, --out without a value -> exit 2 with usage; --help -> 0.
# scaling: --scaling on the 4-, 1- and 2-device runs -> sorted table, scaling.md and two SVGs; runs of
# one world size or without summary.json -> exit 1; fewer than two runs -> exit 2.
foreach(_mode ok default_out bad_run missing_dir usage scaling)
  add_test(NAME tools/report/${_mode}
           COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:ember-report> -DRUNS=${_report_runs}
                   -DOUT=${_report_out}/${_mode} -DMODE=${_mode}
                   -P ${CMAKE_CURRENT_LIST_DIR}/report/check_report.cmake)
  set_tests_properties(tools/report/${_mode} PROPERTIES LABELS "cpu;tools" TIMEOUT 60)
endforeach()
