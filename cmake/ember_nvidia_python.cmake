# ember_nvidia_python_dirs(<pkg> <out-var>): folders of pip's `nvidia/<pkg>` package (e.g. the
# nvidia-cudnn-cu13 wheel puts cudnn.h and libcudnn.so.9 under site-packages/nvidia/cudnn), found
# through every python3 on PATH. Empty when there is none.
function(ember_nvidia_python_dirs pkg out)
  set(_dirs "")
  find_program(_ember_python NAMES python3 python)
  if(_ember_python)
    execute_process(
      COMMAND ${_ember_python} -c "import site,sys,glob,os\nroots=site.getsitepackages()+[site.getusersitepackages()]+sys.path\nprint(';'.join(sorted({d for r in roots if r for d in glob.glob(os.path.join(r,'nvidia','${pkg}'))})))"
      OUTPUT_VARIABLE _py OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND _py)
      list(APPEND _dirs ${_py})
    endif()
  endif()
  set(${out} ${_dirs} PARENT_SCOPE)
endfunction()
