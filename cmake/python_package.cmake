# The Python package's files (pip install . through scikit-build-core, which installs only the
# "python" component; pyproject.toml). Into the package folder tsock/:
#   libtsock.so.0  the library, one file under its soname (a wheel holds no symlinks), found by
#                  tsock/_lib.py next to the package;
#   bin/PROGRAM    tsock-producer, tsock-consume, tsock-stat, tsock-keygen, tsock-mkdataset,
#                  with RUNPATH $ORIGIN/.. so that they load that library; tsock/_programs.py
#                  puts launchers for them on the environment's PATH.
# scripts/wheel.sh repairs the same wheel with auditwheel, which rewrites these RUNPATHs to add
# the libraries it bundles.
set(TSOCK_PY_DIR tsock)
install(FILES $<TARGET_FILE:tsock> DESTINATION ${TSOCK_PY_DIR} RENAME libtsock.so.0
        COMPONENT python)
set(_tsock_py_programs tsock-producer tsock-consume tsock-stat tsock-keygen tsock-mkdataset)
set_target_properties(${_tsock_py_programs} PROPERTIES INSTALL_RPATH "$ORIGIN/..")
install(TARGETS ${_tsock_py_programs} RUNTIME DESTINATION ${TSOCK_PY_DIR}/bin COMPONENT python)
