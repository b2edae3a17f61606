# ember_nvidia_python_dirs(<pkg> <out-var>): folders of pip's `nvidia/<pkg>` package (e.g. the
# nvidia-cudnn-cu13 wheel puts cudnn.h under site-packages/nvidia/cudnn/include and only the
# versioned libcudnn.so.9 under .../lib), found through the Python interpreter named by
# Python3_EXECUTABLE / EMBER_PYTHON, else every python3 on PATH. Searches site-packages, the user
# site and sys.path (so PYTHONPATH counts). Empty when there is none.
include_guard(GLOBAL)

function(ember_nvidia_python_dirs pkg out)
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
    execute_process(
      COMMAND ${_py_exe} -c "import site,sys,glob,os\nroots=site.getsitepackages()+[site.getusersitepackages()]+sys.path\nprint(';'.join(sorted({d for r in roots if r for d in glob.glob(os.path.join(r,'nvidia','${pkg}'))})))"
      OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _py)
      list(APPEND _dirs ${_py})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES _dirs)
  set(${out} ${_dirs} PARENT_SCOPE)
endfunction()
