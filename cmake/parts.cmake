# The parts of libtsock and the arrows between them (docs: design, "Dependency rules"), and
# the include setup that enforces them. Included by the top-level CMakeLists.txt, so that
# libtsock/ (the parts' object libraries) and tests/layering/ (the checks) share one table.
#
# Sources include other parts as "part/file.h" relative to libtsock/. For each part, configure
# writes a folder ${TSOCK_PARTS_DIR}/<id> of symbolic links named after the parts it may use,
# pointing at their source folders; the part compiles with that folder and include/ (the
# public headers) as its only include path. An include of a part that is not allowed is then
# "No such file or directory". A part's own folder is always linked. A part with sub-parts
# (backend/) is linked file by file, so that "backend" means the table header(s) directly in
# libtsock/backend/, not backend/shm/ or backend/cuda/.
#
# Only relative includes ("sibling.h", never "../part/x.h") and the quoted "part/file.h" form
# go through this; tests/layering also rejects "../" includes.

set(TSOCK_LIBSRC ${PROJECT_SOURCE_DIR}/libtsock)
set(TSOCK_PARTS_DIR ${PROJECT_BINARY_DIR}/libtsock/parts)

# The arrows: TSOCK_ALLOW_<id> lists what part <id> may include besides itself and the public
# headers (core is listed explicitly). An entry is a part ("proto") or one header
# ("image/convert.h"). <id> is the part with '/' replaced by '_'.
set(TSOCK_PARTS core proto ring transport backend backend/shm backend/cuda
                dataset io image augment pipeline engine)
set(TSOCK_ALLOW_core "")
set(TSOCK_ALLOW_proto core)
set(TSOCK_ALLOW_ring core)
set(TSOCK_ALLOW_transport core proto)
set(TSOCK_ALLOW_backend core)
set(TSOCK_ALLOW_backend_shm core backend)
# backend/cuda implements the pipeline's device decoder (image/device_decoder.h), and the
# simulated device decodes with the CPU decoder (image/image.h): issue 20.
set(TSOCK_ALLOW_backend_cuda core backend image/image.h image/device_decoder.h)
set(TSOCK_ALLOW_dataset core)
set(TSOCK_ALLOW_io core)
set(TSOCK_ALLOW_image core)
set(TSOCK_ALLOW_augment core image)
set(TSOCK_ALLOW_pipeline core dataset io image augment)
set(TSOCK_ALLOW_engine core proto ring transport backend dataset)

# tsock_part_id(<part> <var>): "backend/shm" -> "backend_shm" (target and folder names).
function(tsock_part_id part var)
  string(REPLACE "/" "_" id "${part}")
  set(${var} ${id} PARENT_SCOPE)
endfunction()

# tsock_part_entries(<part> <var>): what <part>'s folder links: its arrows, itself, and for a
# sub-part of backend/ the table it fills.
function(tsock_part_entries part var)
  tsock_part_id(${part} id)
  set(entries ${TSOCK_ALLOW_${id}})
  if(part MATCHES "^backend/")
    list(APPEND entries backend)
  endif()
  list(APPEND entries ${part})
  list(REMOVE_DUPLICATES entries)
  set(${var} ${entries} PARENT_SCOPE)
endfunction()

# Files directly in libtsock/backend/ (the table), linked one by one; globbed with
# CONFIGURE_DEPENDS so that a new file there reconfigures and gets its link.
file(GLOB _tsock_backend_files LIST_DIRECTORIES false CONFIGURE_DEPENDS ${TSOCK_LIBSRC}/backend/*)

# Links ${dir}/<entry> to libtsock/<entry>: backend/ file by file, anything else (a part
# without sub-parts, a sub-part, one header) as one link.
function(_tsock_link_entry dir entry)
  if(entry STREQUAL "backend")
    file(MAKE_DIRECTORY ${dir}/backend)
    foreach(f ${_tsock_backend_files})
      get_filename_component(name ${f} NAME)
      file(CREATE_LINK ${f} ${dir}/backend/${name} SYMBOLIC)
    endforeach()
    return()
  endif()
  set(src ${TSOCK_LIBSRC}/${entry})
  if(NOT EXISTS ${src})
    message(WARNING "tsock: the allowed include '${entry}' does not exist (any more): drop it "
                    "from the arrows in cmake/parts.cmake")
    return()
  endif()
  get_filename_component(parent ${dir}/${entry} DIRECTORY)
  file(MAKE_DIRECTORY ${parent})
  file(CREATE_LINK ${src} ${dir}/${entry} SYMBOLIC)
endfunction()

# Each part's folder, written afresh at every configure: an arrow removed from the table must
# not survive as an old link.
foreach(_tsock_part ${TSOCK_PARTS})
  tsock_part_id(${_tsock_part} _tsock_id)
  file(REMOVE_RECURSE ${TSOCK_PARTS_DIR}/${_tsock_id})
  file(MAKE_DIRECTORY ${TSOCK_PARTS_DIR}/${_tsock_id})
  tsock_part_entries(${_tsock_part} _tsock_entries)
  foreach(_tsock_entry ${_tsock_entries})
    _tsock_link_entry(${TSOCK_PARTS_DIR}/${_tsock_id} ${_tsock_entry})
  endforeach()
endforeach()

# External headers that belong to one part: CUDA's to backend/cuda/, ZeroMQ's to transport/
# (the engines reach ZeroMQ only through the channel). On many machines
# these headers sit on the compiler's default path (/usr/include, or /usr/local/include where
# the CUDA toolkit links its headers), out of reach of any include path we leave out. So every
# other part gets, first in its include path, a folder of same-named headers that stop the
# compile with an #error naming the rule.
set(TSOCK_POISON_CUDA_DIR ${TSOCK_PARTS_DIR}/_poison_cuda)
set(TSOCK_POISON_ZMQ_DIR ${TSOCK_PARTS_DIR}/_poison_zmq)
set(_tsock_cuda_headers cuda.h cuda_runtime.h cuda_runtime_api.h cudaTypedefs.h driver_types.h
                        driver_functions.h vector_types.h cuda_fp16.h cuda_bf16.h nvrtc.h)
if(TSOCK_HAVE_CUDA)
  foreach(_tsock_dir ${CUDAToolkit_INCLUDE_DIRS})
    file(GLOB _tsock_found RELATIVE ${_tsock_dir} ${_tsock_dir}/*.h ${_tsock_dir}/*.hpp)
    list(APPEND _tsock_cuda_headers ${_tsock_found})
  endforeach()
  list(REMOVE_DUPLICATES _tsock_cuda_headers)
endif()
file(REMOVE_RECURSE ${TSOCK_POISON_CUDA_DIR} ${TSOCK_POISON_ZMQ_DIR})
foreach(_tsock_h ${_tsock_cuda_headers})
  file(WRITE ${TSOCK_POISON_CUDA_DIR}/${_tsock_h}
       "#error \"tsock layering: <${_tsock_h}> is for libtsock/backend/cuda/ only (cmake/parts.cmake)\"\n")
endforeach()
foreach(_tsock_h zmq.h zmq_utils.h)
  file(WRITE ${TSOCK_POISON_ZMQ_DIR}/${_tsock_h}
       "#error \"tsock layering: <${_tsock_h}> is for libtsock/transport/ only (cmake/parts.cmake)\"\n")
endforeach()

# What every part compiles with, whatever it may include: the public headers, the feature
# definitions, hidden visibility (only tsock_* is exported, see libtsock/tsock.map).
add_library(tsock_part_common INTERFACE)
target_include_directories(tsock_part_common INTERFACE ${PROJECT_SOURCE_DIR}/include)
# The .cu file's host code is C++ only in name (kernel launch stubs): without exceptions,
# RTTI and thread-safe statics it needs no C++ runtime, so libtsock stays a C library that
# links with the C linker and has no libstdc++ dependency.
target_compile_options(tsock_part_common INTERFACE
  "$<$<COMPILE_LANGUAGE:C>:-fvisibility=hidden>"
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fvisibility=hidden,-fno-exceptions,-fno-rtti,-fno-threadsafe-statics>")
if(TSOCK_HAVE_CUDA)
  target_compile_definitions(tsock_part_common INTERFACE TSOCK_HAVE_CUDA=1)
endif()
if(TSOCK_HAVE_URING)
  target_compile_definitions(tsock_part_common INTERFACE TSOCK_HAVE_URING=1)
endif()
target_link_libraries(tsock_part_common INTERFACE Threads::Threads)

# tsock_part_setup(<target> <part>): compile <target> as part <part> (include path, flags,
# the external headers that part uses). Used for the part's object library and for the
# probes of tests/layering, so that a probe sees exactly what its part sees.
function(tsock_part_setup target part)
  tsock_part_id(${part} id)
  target_include_directories(${target} PRIVATE ${TSOCK_PARTS_DIR}/${id})
  if(NOT part STREQUAL "backend/cuda")
    target_include_directories(${target} BEFORE PRIVATE ${TSOCK_POISON_CUDA_DIR})
  endif()
  if(NOT part STREQUAL "transport")
    target_include_directories(${target} BEFORE PRIVATE ${TSOCK_POISON_ZMQ_DIR})
  endif()
  target_link_libraries(${target} PRIVATE tsock_part_common)
  # External headers where they are used: ZeroMQ for the channel, the codecs for image/,
  # liburing for io/, CUDA for backend/cuda/ alone.
  if(part STREQUAL "transport")
    target_link_libraries(${target} PRIVATE PkgConfig::ZMQ)
  elseif(part STREQUAL "image")
    target_link_libraries(${target} PRIVATE PkgConfig::JPEG PkgConfig::PNG)
  elseif(part STREQUAL "io" AND TSOCK_HAVE_URING)
    target_link_libraries(${target} PRIVATE PkgConfig::URING)
  elseif(part STREQUAL "backend/cuda" AND TSOCK_HAVE_CUDA)
    target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
endfunction()
