# The include rule of docs/architecture.md, checked on every source file: a library folder includes
# ember headers only as <ember/FOLDER/...> and only from the folders its row allows (parallel/ as
# two rooms: parallel_comm/ names its communication half in the messages). Run as
#   cmake -DROOT=<source root> -P check_includes.cmake
# Prints every offending line as "path:line: ..." and fails when there is one.
if(NOT ROOT)
  message(FATAL_ERROR "check_includes.cmake: pass -DROOT=<source root>")
endif()

# folder -> the folders it may include (itself included).
set(allow_core core)
set(allow_kernels core kernels)
set(allow_autograd core kernels autograd)
set(allow_layers core kernels autograd layers)
set(allow_models core kernels autograd layers models)
set(allow_optim core kernels autograd layers optim)
set(allow_data core kernels data)
set(allow_serialize core kernels autograd serialize)
set(allow_parallel core kernels autograd layers models optim data serialize parallel_comm parallel)
set(allow_profiler core kernels autograd layers models optim data serialize parallel_comm parallel profiler)
set(allow_train core kernels autograd layers models optim data serialize parallel_comm parallel profiler train)
# parallel/ holds two rooms. Its communication half (store, sockets, env, init, process groups,
# ring, the collectives on a group) sits below autograd/: it may include only core/, kernels/ and
# itself. The training half, the files named here (DataParallel, DDP, its reducer, and the
# differentiable Broadcast/Scatter/Gather), sits on top. A new parallel/ file starts in the
# communication half, so reaching up from it fails here until it is named below.
set(parallel_training_half data_parallel ddp reducer comm_ops sync_batchnorm zero join)
set(allow_parallel_comm core kernels parallel_comm)
set(library core kernels autograd layers models optim data serialize parallel profiler train)

# The room of a file (or include target) `path` in library folder `folder`: the folder itself, or
# parallel_comm for a parallel/ file outside the training half.
function(room_of folder path out)
  set(room ${folder})
  if(folder STREQUAL "parallel")
    get_filename_component(stem ${path} NAME_WE)
    list(FIND parallel_training_half "${stem}" in_training)
    if(in_training EQUAL -1)
      set(room parallel_comm)
    endif()
  endif()
  set(${out} ${room} PARENT_SCOPE)
endfunction()

set(violations 0)
foreach(folder IN LISTS library)
  file(GLOB_RECURSE files ${ROOT}/${folder}/*.h ${ROOT}/${folder}/*.cpp ${ROOT}/${folder}/*.cu ${ROOT}/${folder}/*.cuh)
  foreach(f IN LISTS files)
    file(RELATIVE_PATH rel ${ROOT} ${f})
    room_of(${folder} ${f} room)
    file(STRINGS ${f} lines)
    set(n 0)
    foreach(line IN LISTS lines)
      math(EXPR n "${n} + 1")
      if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*[<\"]([^>\"]+)[>\"]")
        set(target "${CMAKE_MATCH_1}")
        set(to "")
        if(target MATCHES "^ember/([a-z_]+)/")
          room_of(${CMAKE_MATCH_1} ${target} to)
        elseif(target MATCHES "^([a-z_]+)/")
          list(FIND library "${CMAKE_MATCH_1}" is_lib)
          if(is_lib GREATER -1)
            message("${rel}:${n}: '${target}' must be included as <ember/${target}>")
            math(EXPR violations "${violations} + 1")
          endif()
        endif()
        if(to)
          list(FIND allow_${room} "${to}" ok)
          if(ok EQUAL -1)
            message("${rel}:${n}: ${room}/ may not include ${to}/ (<${target}>); "
                    "${room}/ may include: ${allow_${room}}")
            math(EXPR violations "${violations} + 1")
          endif()
        endif()
      endif()
    endforeach()
  endforeach()
endforeach()
if(violations GREATER 0)
  message(FATAL_ERROR "include rule: ${violations} violation(s) (see docs/architecture.md, section 1)")
endif()
message("include rule: every library include points to an allowed folder")
