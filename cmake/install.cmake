# Install rules: the shared and static library, the public headers, the programs, a pkg-config
# file and a CMake package config, so that an installed tsock is used with either
#   find_package(tsock CONFIG REQUIRED) + target_link_libraries(x PRIVATE tsock::tsock)
# or
#   cc x.c $(pkg-config --cflags --libs tsock)
include(CMakePackageConfigHelpers)

set(TSOCK_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/tsock")
set(TSOCK_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig")

install(TARGETS tsock tsock_static
        EXPORT tsockTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/tsock
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")

# The programs (producer/CMakeLists.txt installs them into bin/) link the shared library; let
# them find it relative to themselves, so an install into any prefix runs without
# LD_LIBRARY_PATH.
foreach(_tsock_prog tsock-producer tsock-consume)
  if(TARGET ${_tsock_prog})
    set_target_properties(${_tsock_prog} PROPERTIES
      INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
  endif()
endforeach()

# CMake package: tsockTargets.cmake (tsock::tsock, tsock::tsock_static), tsockConfig.cmake
# and a version file. Same major version is compatible.
install(EXPORT tsockTargets
        NAMESPACE tsock::
        FILE tsockTargets.cmake
        DESTINATION ${TSOCK_INSTALL_CMAKEDIR})
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/tsockConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tsockConfig.cmake
  INSTALL_DESTINATION ${TSOCK_INSTALL_CMAKEDIR})
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/tsockConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tsockConfig.cmake
              ${PROJECT_BINARY_DIR}/tsockConfigVersion.cmake
        DESTINATION ${TSOCK_INSTALL_CMAKEDIR})

# pkg-config file. The prefix is written relative to the .pc file's own folder (${pcfiledir}),
# so the file stays right when the prefix is chosen at install time (cmake --install --prefix)
# or the tree is moved; with an absolute libdir the configured absolute paths are used.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TSOCK_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _tsock_pc_up "/prefix/${TSOCK_INSTALL_PKGCONFIGDIR}" "/prefix")
  string(REGEX REPLACE "/$" "" _tsock_pc_up "${_tsock_pc_up}")
  set(TSOCK_PC_PREFIX "\${pcfiledir}/${_tsock_pc_up}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(TSOCK_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  set(TSOCK_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(TSOCK_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(TSOCK_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
# liburing is a private dependency only when the reader was built with io_uring.
set(TSOCK_PC_URING "")
if(TSOCK_HAVE_URING)
  set(TSOCK_PC_URING " liburing")
endif()
# The CUDA runtime, statically, when the CUDA backend is built in (static linking only).
set(TSOCK_PC_CUDA "")
if(TSOCK_HAVE_CUDA)
  set(TSOCK_PC_CUDA " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/tsock.pc.in ${PROJECT_BINARY_DIR}/tsock.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tsock.pc DESTINATION ${TSOCK_INSTALL_PKGCONFIGDIR})
