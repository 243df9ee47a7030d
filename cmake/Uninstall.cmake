# Removes what `cmake --install` put under PREFIX, as the manifests it wrote
# there list (share/collectived/install_manifest_*.txt), then the manifests
# and the directories left empty. The live configuration is not in any
# manifest, so it stays. Run as:
#   cmake -DPREFIX=/usr/local [-DDATADIR=share] -P cmake/Uninstall.cmake
# ($DESTDIR is honoured, as by the install.)
if(NOT DEFINED PREFIX)
  message(FATAL_ERROR "Uninstall.cmake: set -DPREFIX=<the install prefix>")
endif()
if(NOT DEFINED DATADIR)
  set(DATADIR share)
endif()
if(IS_ABSOLUTE "${DATADIR}")
  set(manifest_dir "$ENV{DESTDIR}${DATADIR}/collectived")
else()
  set(manifest_dir "$ENV{DESTDIR}${PREFIX}/${DATADIR}/collectived")
endif()
file(GLOB manifests "${manifest_dir}/install_manifest_*.txt")
if(NOT manifests)
  message(FATAL_ERROR "No install manifest under ${manifest_dir}: nothing installed there?")
endif()

set(files "")
foreach(manifest IN LISTS manifests)
  file(STRINGS "${manifest}" listed)
  list(APPEND files ${listed})
endforeach()
list(REMOVE_DUPLICATES files)

set(directories "")
foreach(file IN LISTS files)
  set(path "$ENV{DESTDIR}${file}")
  if(EXISTS "${path}" OR IS_SYMLINK "${path}")
    message(STATUS "Removing: ${path}")
    file(REMOVE "${path}")
  endif()
  get_filename_component(directory "${path}" DIRECTORY)
  list(APPEND directories "${directory}")
endforeach()
file(REMOVE ${manifests})
list(APPEND directories "${manifest_dir}")

# Directories of this project (named collective..., or below one, as
# share/doc/collectived/docs) that are empty now, deepest first; shared ones
# (bin, lib, share/man/man8) stay.
list(REMOVE_DUPLICATES directories)
list(SORT directories ORDER DESCENDING)
foreach(directory IN LISTS directories)
  file(RELATIVE_PATH below_prefix "$ENV{DESTDIR}${PREFIX}" "${directory}")
  if(IS_DIRECTORY "${directory}" AND below_prefix MATCHES "(^|/)collective[^/]*(/|$)")
    file(GLOB left "${directory}/*")
    if(NOT left)
      file(REMOVE_RECURSE "${directory}")
    endif()
  endif()
endforeach()
