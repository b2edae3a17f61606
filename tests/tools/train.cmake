# CTest entries that run build/bin/ember-train as a user would, through tests/tools/train_cli.sh
# (label `tools`; the cases are described at its top). include()d from tests/CMakeLists.txt.
#   tools/train/usage         bad command lines -> exit 2 with the usage; --help -> 0
#   tools/train/bad_config    unknown key, mistyped override, missing data -> exit 2 naming them
#   tools/train/rerun         <run>/config.json runs again; a run directory in use is refused; log.txt gets the error
#   tools/train/print_config  --print-config output is a config that reads back to itself
#   tools/train/sigterm       SIGTERM -> exit 143 + last.ckpt; resume=auto = the uninterrupted run
#   tools/train/dp            parallel.mode=dp over cpu,cpu
#   tools/train/nonfinite     a loss that overflows: train.on_nonfinite stop (exit 1, nothing written) / skip
#   tools/train/profile       profile.enabled=true: profile/trace.json and profile/ops.md
#   tools/train/amp_accuracy  precision bf16 and fp16 within 1% of fp32 (Fashion-MNIST slice)
#   tools/train/ddp_sigterm   the same with parallel.mode=ddp on 2 processes under ember-run
#   tools/train/ddp_nonfinite the same on 2 processes: the ranks agree on stopping or skipping
#   tools/train/ddp_global_batch  data.global_batch_size and optim.lr_scaling on 2 processes
#   tools/train/ddp_zero      parallel.zero=1: bitwise the plain DDP run's metrics, also resumed
#   tools/train/ddp_restart   ember-run --max-restarts 1: rank 1 SIGKILLed, the job resumes and ends like an uninterrupted run
#   tools/train/ddp_accuracy  DDP on 2 processes within 1% of one process (Fashion-MNIST slice)
#   tools/train/profile_ddp   profile.enabled=true on 2 processes: one profile/trace.json with both ranks' rows
if(NOT TARGET ember-train)
  return()
endif()
find_program(EMBER_BASH bash)
if(NOT EMBER_BASH)
  message(STATUS "ember: bash not found; tools/train/* tests not added")
  return()
endif()
foreach(_case usage bad_config rerun print_config sigterm dp nonfinite amp_accuracy profile)
  add_test(NAME tools/train/${_case}
           COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/train_cli.sh ${_case} $<TARGET_FILE:ember-train>
                   ${CMAKE_CURRENT_BINARY_DIR}/train-cli/${_case})
  set_tests_properties(tools/train/${_case} PROPERTIES LABELS "cpu;tools" TIMEOUT 300 SKIP_RETURN_CODE 77)
endforeach()
if(TARGET ember-run)
  foreach(_case ddp_sigterm ddp_nonfinite ddp_global_batch ddp_zero ddp_restart ddp_accuracy profile_ddp)
    add_test(NAME tools/train/${_case}
             COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/train_cli.sh ${_case} $<TARGET_FILE:ember-train>
                     ${CMAKE_CURRENT_BINARY_DIR}/train-cli/${_case} $<TARGET_FILE:ember-run>)
    set_tests_properties(tools/train/${_case} PROPERTIES LABELS "cpu;tools;multiproc" TIMEOUT 300 SKIP_RETURN_CODE 77)
  endforeach()
endif()
# The limits guard against a hang, not a speed, so a sanitizer tree gets 900 s where the normal one
# gets 300: amp_accuracy trains three times (fp32, then bf16 and fp16, emulated on the CPU), 78 s in
# the normal tree on CI's 2 cores and over 300 s under ASan (2026-11-28); ddp_sigterm runs ember-train
# five times, two of them DDP over 3 epochs, and took 271 s of its 300 under TSan in CI (2026-11-28).
if(EMBER_SANITIZE)
  set_tests_properties(tools/train/amp_accuracy PROPERTIES TIMEOUT 900)
  if(TARGET ember-run)
    set_tests_properties(tools/train/ddp_sigterm tools/train/ddp_restart PROPERTIES TIMEOUT 900)
  endif()
endif()
