# ember_nvidia_python_dirs(<pkg> <out-var> [<pythons-out-var>]): folders of pip's `nvidia/<pkg>`
# package (e.g. the nvidia-cudnn-cu13 wheel puts cudnn.h under site-packages/nvidia/cudnn/include
# and only the versioned libcudnn.so.9 under .../lib), found through the Python interpreter named by
# EMBER_PYTHON / Python3_EXECUTABLE, else the first python3 (or python) on PATH. The folders come in
# the order `import nvidia.<pkg>` would try them (sys.path: PYTHONPATH, then the venv or system
# site-packages), then site.getsitepackages() and the user site for what sys.path lacks. Empty when
# there is none. <pythons-out-var>, if given, receives the interpreters asked (for error messages).
include_guard(GLOBAL)

function(ember_nvidia_python_dirs pkg out)
  # The script, in the function (not at include time) so that every caller's scope sees it.
  # It prints one ';'-list. getsitepackages() is absent from old virtualenv's site.py, hence getattr.
  set(_script [=[
import os, site, sys
roots = list(sys.path) + list(getattr(site, "getsitepackages", lambda: [])())
roots.append(getattr(site, "getusersitepackages", lambda: "")())
found = []
for r in roots:
    d = os.path.join(r, "nvidia", PKG) if r else ""
    if d and os.path.isdir(d) and d not in found:
        found.append(d)
print(";".join(found))
]=])
  set(_dirs "")
  set(_pythons ${EMBER_PYTHON} ${Python3_EXECUTABLE})
  if(NOT _pythons)
    find_program(EMBER_PYTHON_FOR_NVIDIA NAMES python3 python)
    mark_as_advanced(EMBER_PYTHON_FOR_NVIDIA)
    if(EMBER_PYTHON_FOR_NVIDIA)
      set(_pythons ${EMBER_PYTHON_FOR_NVIDIA})
    endif()
  endif()
  foreach(_py_exe IN LISTS _pythons)
    execute_process(COMMAND ${_py_exe} -c "PKG = '${pkg}'\n${_script}"
                    OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _py)
      list(APPEND _dirs ${_py})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _dirs)
  set(${out} ${_dirs} PARENT_SCOPE)
  if(ARGC GREATER 2)
    set(${ARGV2} ${_pythons} PARENT_SCOPE)
  endif()
endfunction()
