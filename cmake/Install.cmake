# What `cmake --install build` (or `make install`) puts where, in three
# components:
#   daemon   collectived, collectivectl, their shared library, the default
#            configuration, man pages, bash completion and the README with
#            docs/ (the container image installs only this one)
#   client   libcollective with its headers, collectiverun, demo-trainer,
#            collectiverun's man page and bash completion
#   systemd  the unit and the sysusers.d file that creates its user
#   python   the collective package (collective.torch) for the python3 it
#            was built for, with libcollective; pip installs this component
#            too, into a wheel (pyproject.toml)
# Paths follow GNUInstallDirs (FHS): /usr/local/bin, /usr/local/etc, ... for
# the default prefix; configure with -DCMAKE_INSTALL_PREFIX=/usr for /usr/bin
# and /etc. Each component also records the files it installed in
# share/collectived/install_manifest_<component>.txt, which `cmake --build
# build --target uninstall` (make uninstall) reads: a manifest kept in the
# prefix itself, so that installing elsewhere (a test, a package build) does
# not change what an uninstall removes.
include(GNUInstallDirs)

# Installed binaries find the project's shared libraries next to them,
# wherever the prefix is (/usr/local, /opt/collectived in the image).
set_target_properties(collectived collectivectl collectiverun demo-trainer PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
# libcollective loads libcollective-proto from beside itself: a trainer's own
# RUNPATH does not reach the libraries that libcollective needs.
set_target_properties(collective PROPERTIES INSTALL_RPATH "$ORIGIN")

# A path of GNUInstallDirs as it will be at install time: the prefix may be
# overridden then (cmake --install --prefix), so it is resolved in the
# install script, not here.
function(collective_install_path out dir)
  set(${out} "\${CMAKE_INSTALL_PREFIX}/${dir}" PARENT_SCOPE)
  if(IS_ABSOLUTE "${dir}")
    set(${out} "${dir}" PARENT_SCOPE)
  endif()
endfunction()

# Records what this install has put in place so far into the prefix's
# manifest for `component`.
function(collective_install_manifest component)
  install(CODE "
    set(manifest \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_DATADIR}/collectived/install_manifest_${component}.txt\")
    list(REMOVE_DUPLICATES CMAKE_INSTALL_MANIFEST_FILES)
    list(JOIN CMAKE_INSTALL_MANIFEST_FILES \"\\n\" files)
    file(WRITE \"\${manifest}\" \"\${files}\\n\")
    " COMPONENT ${component})
endfunction()

# Man pages made of the programs' own --help (scripts/help-to-man.sh), built
# with them.
set(man_dir ${CMAKE_BINARY_DIR}/man)
set(collective_man_pages "")
function(collective_man_page program section summary)
  set(page ${man_dir}/${program}.${section})
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${man_dir}
    COMMAND sh ${PROJECT_SOURCE_DIR}/scripts/help-to-man.sh ${page} ${program} ${section}
      ${summary} $<TARGET_FILE:${program}> ${ARGN}
    DEPENDS ${program} ${PROJECT_SOURCE_DIR}/scripts/help-to-man.sh
    COMMENT "man page ${program}(${section})"
    VERBATIM)
  set(collective_man_pages ${collective_man_pages} ${page} PARENT_SCOPE)
endfunction()
collective_man_page(collectived 8 "per-node collective communication daemon")
collective_man_page(collectivectl 1 "inspect a running collectived" status health
  "timeline start" "timeline stop" metrics)
collective_man_page(collectiverun 1 "start the ranks of a training job on collectived, as horovodrun does")
add_custom_target(man-pages ALL DEPENDS ${collective_man_pages})

# --- daemon ---------------------------------------------------------------
install(TARGETS collectived collectivectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT daemon)
install(TARGETS collective_proto LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT daemon
  NAMELINK_SKIP)
# The shipped configuration, for reference and for `diff` after an upgrade.
install(FILES config/collectived.yaml DESTINATION ${CMAKE_INSTALL_DATADIR}/collectived
  COMPONENT daemon)
# The live one is the operator's: put in place only when there is none, and
# not recorded, so that neither an upgrade nor an uninstall touches it.
collective_install_path(config_dir "${CMAKE_INSTALL_SYSCONFDIR}/collectived")
install(CODE "
  set(live \"\$ENV{DESTDIR}${config_dir}/collectived.yaml\")
  if(EXISTS \"\${live}\")
    message(STATUS \"Kept: \${live} (the shipped one is in share/collectived)\")
  else()
    file(MAKE_DIRECTORY \"\$ENV{DESTDIR}${config_dir}\")
    file(COPY \"${PROJECT_SOURCE_DIR}/config/collectived.yaml\" DESTINATION \"\$ENV{DESTDIR}${config_dir}\")
    message(STATUS \"Installing: \${live}\")
  endif()
  " COMPONENT daemon)
install(FILES ${man_dir}/collectived.8 DESTINATION ${CMAKE_INSTALL_MANDIR}/man8 COMPONENT daemon)
install(FILES ${man_dir}/collectivectl.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT daemon)
install(FILES README.md DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT daemon)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs COMPONENT daemon
  FILES_MATCHING PATTERN "*.md")
# bash completion, one file under each program's name, where bash-completion
# looks for it on first use (deploy/completion/collective.bash).
set(completion_dir ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)
foreach(program collectived collectivectl)
  install(FILES deploy/completion/collective.bash DESTINATION ${completion_dir}
    RENAME ${program} COMPONENT daemon)
endforeach()
collective_install_manifest(daemon)

# --- client ---------------------------------------------------------------
install(TARGETS collective LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client)
install(TARGETS collective_proto LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT client
  NAMELINK_SKIP)
install(TARGETS collectiverun demo-trainer RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT client)
install(DIRECTORY client/include/collective DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  COMPONENT client)
install(FILES ${man_dir}/collectiverun.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT client)
install(FILES deploy/completion/collective.bash DESTINATION ${completion_dir}
  RENAME collectiverun COMPONENT client)
collective_install_manifest(client)

# --- python ---------------------------------------------------------------
# The package where the interpreter looks under the prefix; the extension
# finds the libcollective of the same prefix relative to itself, so the
# install works wherever the prefix is and needs no build tree. libcollective
# and libcollective-proto are part of this component too: the package does
# not load without them.
# Under pip (pyproject.toml, scikit-build-core sets SKBUILD) the prefix is
# the wheel's root: the package lies there and its libraries in
# collective/lib, each once, under its soname (a wheel holds no symbolic
# links), with the RPATH it will have installed ($ORIGIN), set at link time
# since install(FILES) does not rewrite it.
if(TARGET collective_python_core)
  if(SKBUILD)
    set(python_dir .)
    set(python_libdir collective/lib)
  else()
    set(python_dir ${COLLECTIVE_PYTHON_INSTALL_DIR})
    set(python_libdir ${CMAKE_INSTALL_LIBDIR})
  endif()
  file(RELATIVE_PATH python_to_libdir "/root/${python_dir}/collective" "/root/${python_libdir}")
  set_target_properties(collective_python_core PROPERTIES
    INSTALL_RPATH "$ORIGIN/${python_to_libdir}")
  install(TARGETS collective_python_core
    LIBRARY DESTINATION ${python_dir}/collective COMPONENT python)
  # The sources, with the type stubs of collective._core and the py.typed
  # marker (PEP 561) that tells type checkers to read them.
  install(DIRECTORY client/python/collective DESTINATION ${python_dir}
    COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed"
    PATTERN "__pycache__" EXCLUDE)
  if(SKBUILD)
    set_target_properties(collective collective_proto PROPERTIES BUILD_WITH_INSTALL_RPATH ON)
    foreach(library collective collective_proto)
      get_target_property(soversion ${library} SOVERSION)
      get_target_property(output_name ${library} OUTPUT_NAME)
      if(NOT output_name)
        set(output_name ${library})
      endif()
      install(FILES $<TARGET_FILE:${library}> DESTINATION ${python_libdir}
        RENAME lib${output_name}.so.${soversion} COMPONENT python)
    endforeach()
  else()
    install(TARGETS collective collective_proto LIBRARY DESTINATION ${python_libdir}
      COMPONENT python NAMELINK_SKIP)
  endif()
  # collective.tensorflow's op library, where it was built: libcollective of
  # the same prefix, then the TensorFlow it was built against (the op
  # library is tied to that TensorFlow's version).
  if(TARGET collective_tensorflow_ops)
    file(RELATIVE_PATH tensorflow_to_libdir
      "/root/${python_dir}/collective/tensorflow" "/root/${python_libdir}")
    get_target_property(tensorflow_rpath collective_tensorflow_ops INSTALL_RPATH)
    set_target_properties(collective_tensorflow_ops PROPERTIES
      INSTALL_RPATH "$ORIGIN/${tensorflow_to_libdir};${tensorflow_rpath}")
    install(TARGETS collective_tensorflow_ops
      LIBRARY DESTINATION ${python_dir}/collective/tensorflow COMPONENT python)
  endif()
  # What pip builds (pyproject.toml's build.targets): the client side only.
  add_custom_target(collective_wheel)
  add_dependencies(collective_wheel collective_python_core collective_python)
  if(TARGET collective_tensorflow_ops)
    add_dependencies(collective_wheel collective_tensorflow_ops)
  endif()
  # A wheel records its files itself; the manifest is for `make uninstall`.
  if(NOT SKBUILD)
    collective_install_manifest(python)
  endif()
endif()

# --- systemd --------------------------------------------------------------
# The unit names the installed paths, which are known only at install time.
collective_install_path(bin_dir "${CMAKE_INSTALL_BINDIR}")
collective_install_path(doc_dir "${CMAKE_INSTALL_DOCDIR}")
set(unit_out ${CMAKE_BINARY_DIR}/deploy/collectived.service)
install(CODE "
  set(COLLECTIVED_BINDIR \"${bin_dir}\")
  set(COLLECTIVED_CONFIG \"${config_dir}/collectived.yaml\")
  set(COLLECTIVED_DOCDIR \"${doc_dir}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/deploy/systemd/collectived.service.in\" \"${unit_out}\" @ONLY)
  " COMPONENT systemd)
install(FILES ${unit_out} DESTINATION lib/systemd/system COMPONENT systemd)
install(FILES deploy/systemd/collectived.sysusers DESTINATION lib/sysusers.d
  RENAME collectived.conf COMPONENT systemd)
collective_install_manifest(systemd)

# `cmake --build build --target uninstall`: removes what the manifests in the
# prefix list (the live configuration stays).
add_custom_target(uninstall
  COMMAND ${CMAKE_COMMAND} -DPREFIX=${CMAKE_INSTALL_PREFIX}
    -DDATADIR=${CMAKE_INSTALL_DATADIR} -P ${PROJECT_SOURCE_DIR}/cmake/Uninstall.cmake
  COMMENT "Removing collectived from ${CMAKE_INSTALL_PREFIX}"
  VERBATIM)
