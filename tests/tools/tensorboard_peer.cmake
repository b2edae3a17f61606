# peer/tensorboard (label `peer`): ember-train's TensorBoard event files read by the tensorboard
# package's own reader, through tests/tools/tensorboard_peer.sh (its cases at its top). Skipped (77)
# where the Python that EMBER_TB_PYTHON (else EMBER_PEER_PYTHON, else python3) names has no
# tensorboard, as on CI. include()d from tests/CMakeLists.txt.
if(NOT TARGET ember-train)
  return()
endif()
find_program(EMBER_BASH bash)
if(NOT EMBER_BASH)
  return()
endif()
add_test(NAME peer/tensorboard
         COMMAND ${EMBER_BASH} ${CMAKE_CURRENT_LIST_DIR}/tensorboard_peer.sh $<TARGET_FILE:ember-train>
                 ${CMAKE_CURRENT_BINARY_DIR}/tensorboard-peer ${CMAKE_CURRENT_LIST_DIR}/../peer/tensorboard_reader.py
                 $<$<TARGET_EXISTS:cifar>:$<TARGET_FILE:cifar>>)
set_tests_properties(peer/tensorboard PROPERTIES LABELS "peer;tools" SKIP_RETURN_CODE 77 TIMEOUT 300)
