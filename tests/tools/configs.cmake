# CTest entries checking every configs/*.json with ember-train (label `tools`); include()d from
# tests/CMakeLists.txt. `ember-train FILE --print-config` parses and validates the file against
# the schema of train/config.h (unknown keys, wrong types and out-of-range values are errors) and
# prints the resolved config; the test wants exit status 0 and the file's own "description" and
# "name" in that output. Configs are found at configure time (a new file re-runs CMake).
if(NOT TARGET ember-train)
  return()
endif()

file(GLOB _config_files CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/configs/*.json)
foreach(_config IN LISTS _config_files)
  get_filename_component(_stem ${_config} NAME_WE)
  file(READ ${_config} _json)
  # Empty when absent or malformed; the test then fails, naming what is missing.
  string(JSON _description ERROR_VARIABLE _err GET "${_json}" description)
  if(_err)
    set(_description "")
  endif()
  string(JSON _name ERROR_VARIABLE _err GET "${_json}" name)
  if(_err)
    set(_name "")
  endif()
  add_test(NAME configs/${_stem}
           COMMAND bash -c [=[
[ -n "$3" ] || { echo "FAIL: $1 has no top-level \"description\" string saying what it shows"; exit 1; }
[ -n "$4" ] || { echo "FAIL: $1 has no top-level \"name\""; exit 1; }
out=$("$0" "$1" --print-config 2>&1); rc=$?; printf '%s\n' "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: ember-train $1 --print-config exited with $rc"; exit 1; }
grep -qF -- "$3" <<<"$out" || { echo "FAIL: the printed config lacks the description of $1"; exit 1; }
grep -qE -- "\"name\": *\"$4\"" <<<"$out" || { echo "FAIL: the printed config lacks \"name\": \"$4\""; exit 1; }
]=] $<TARGET_FILE:ember-train> ${_config} ${_stem} "${_description}" "${_name}")
  set_tests_properties(configs/${_stem} PROPERTIES LABELS tools TIMEOUT 60)
endforeach()
