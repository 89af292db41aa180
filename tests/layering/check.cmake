# Driver of the build.* tests (tests/layering/CMakeLists.txt), run with cmake -P.
#   MODE=part      PART_FILES=<the part's flags file> PARTS=a,b,.. LIBSRC=.. CC=.. WORKDIR=..
#                  HAVE_CUDA=ON|OFF MUST_NOT=<parts the design forbids it, ','-joined>
#   MODE=relative  LIBSRC=..
# A flags file sets PART, ENTRIES (what the part may include), INCLUDES and DEFINES (its
# object library's include directories and definitions).
cmake_minimum_required(VERSION 3.20)

set(failures 0)
macro(fail msg)
  message("FAIL: ${msg}")
  math(EXPR failures "${failures} + 1")
endmacro()

# probe(<line> <rc_var> <out_var>): compiles a file holding <line> with the flags of the part
# whose file was included last.
function(probe line rc_var out_var)
  set(flags "")
  foreach(dir ${INCLUDES})
    list(APPEND flags "-I${dir}")
  endforeach()
  foreach(def ${DEFINES})
    list(APPEND flags "-D${def}")
  endforeach()
  file(MAKE_DIRECTORY ${WORKDIR})
  file(WRITE ${WORKDIR}/probe.c "${line}\nint tsock_probe;\n")
  execute_process(COMMAND ${CC} -std=c11 -fsyntax-only ${flags} ${WORKDIR}/probe.c
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  set(${rc_var} ${rc} PARENT_SCOPE)
  set(${out_var} "${out}" PARENT_SCOPE)
endfunction()

# expect_missing(<header> <line> <what>): <line> must fail to compile because <header> is not
# found (GCC: "x.h: No such file or directory"; clang: "'x.h' file not found") or is one of
# the build's poison headers ("tsock layering: <x.h> is for ...").
function(expect_missing header line what)
  probe("${line}" rc out)
  string(REPLACE "." "\\." header_re "${header}")
  if(rc EQUAL 0)
    fail("${PART}: ${what} COMPILED: ${line}")
  elseif(NOT out MATCHES "${header_re}'?:? (No such file or directory|file not found)"
         AND NOT out MATCHES "tsock layering: <${header_re}> is for")
    fail("${PART}: ${what} failed for another reason than a missing header:\n${out}")
  else()
    message("ok: ${PART} cannot include ${what} (${line})")
  endif()
  set(failures ${failures} PARENT_SCOPE)
endfunction()

function(expect_compiles line what)
  probe("${line}" rc out)
  if(rc EQUAL 0)
    message("ok: ${PART} includes ${what} (${line})")
  else()
    fail("${PART}: ${what} does not compile (${line}):\n${out}")
  endif()
  set(failures ${failures} PARENT_SCOPE)
endfunction()

# first_header(<entry> <var> [EXCLUDE headers...]): the header to include for <entry>: the
# entry itself when it is one header, else the first header of that part's folder (its own
# files only, not its sub-parts') that is not excluded; empty when there is none.
function(first_header entry var)
  set(${var} "" PARENT_SCOPE)
  if(entry MATCHES "\\.h$")
    set(${var} ${entry} PARENT_SCOPE)
    return()
  endif()
  file(GLOB headers RELATIVE ${LIBSRC} ${LIBSRC}/${entry}/*.h)
  list(SORT headers)
  foreach(h ${headers})
    if(NOT h IN_LIST ARGN)
      set(${var} ${h} PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

string(REPLACE "," ";" PARTS "${PARTS}")
string(REPLACE "," ";" MUST_NOT "${MUST_NOT}")

if(MODE STREQUAL "part")
  include(${PART_FILES})
  message("${PART}: may include ${ENTRIES} and include/tsock/*")
  # The table itself keeps to the design: no arrow (to a part or to one of its headers) that
  # the design forbids.
  foreach(banned ${MUST_NOT})
    foreach(entry ${ENTRIES})
      if(entry STREQUAL banned OR entry MATCHES "^${banned}/")
        fail("${PART}: cmake/parts.cmake allows '${entry}', which the design forbids")
      endif()
    endforeach()
  endforeach()
  # What it may use compiles: one header of each allowed part, and each allowed single header.
  foreach(entry ${ENTRIES})
    first_header(${entry} h)
    if(NOT h)
      message("note: ${entry} has no header to try")
    elseif(NOT EXISTS ${LIBSRC}/${h})
      message("note: ${h} is allowed but does not exist")
    else()
      expect_compiles("#include \"${h}\"" "${entry}")
    endif()
  endforeach()
  expect_compiles("#include \"tsock/tsock.h\"" "the public header")
  # Every other part is out of reach. Single headers allowed from a part do not open the rest
  # of that part: the header tried is one that is not allowed.
  foreach(other ${PARTS})
    if(other IN_LIST ENTRIES)
      continue()
    endif()
    first_header(${other} h ${ENTRIES})
    if(NOT h)
      message("note: ${other} has no header to try")
      continue()
    endif()
    expect_missing("${h}" "#include \"${h}\"" "${other}")
  endforeach()
  # External headers that belong to one part (cmake/parts.cmake: the poison folders).
  if(PART STREQUAL "backend/cuda")
    if(HAVE_CUDA)
      expect_compiles("#include <cuda_runtime_api.h>" "<cuda_runtime_api.h>")
    endif()
  else()
    foreach(h cuda_runtime.h cuda_runtime_api.h cuda.h)
      expect_missing("${h}" "#include <${h}>" "<${h}>")
    endforeach()
  endif()
  if(PART STREQUAL "transport")
    expect_compiles("#include <zmq.h>" "<zmq.h>")
  else()
    expect_missing("zmq.h" "#include <zmq.h>" "<zmq.h>")
  endif()
elseif(MODE STREQUAL "relative")
  # "../part/x.h" would bypass the include path: no library source may climb out of its folder.
  file(GLOB_RECURSE sources ${LIBSRC}/*.c ${LIBSRC}/*.h ${LIBSRC}/*.cu)
  foreach(src ${sources})
    file(STRINGS ${src} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]*\\.\\./")
    foreach(line ${lines})
      file(RELATIVE_PATH rel ${LIBSRC} ${src})
      fail("${rel}: ${line}")
    endforeach()
  endforeach()
  list(LENGTH sources n)
  message("checked ${n} files under libtsock/ for \"../\" includes")
else()
  message(FATAL_ERROR "unknown MODE '${MODE}'")
endif()

if(failures GREATER 0)
  message(FATAL_ERROR "${failures} check(s) failed")
endif()
