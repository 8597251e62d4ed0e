# The Debian package (cpack -G DEB, run by scripts/package): forktrial,
# forktrial-full, forktrial-child, the systemd units with example environment files, the man
# pages, bash completion, the Slurm scripts and the Grafana dashboard
# (deploy/CMakeLists.txt installs them), with Debian's copyright file and
# changelog (installed here). Its dependencies are read from the binaries by
# dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME forktrial)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

# The Maintainer field, and the signature of the changelog's entry: whoever
# builds and ships the package (scripts/package passes $FORKTRIAL_MAINTAINER);
# empty means the project's default.
set(forktrial_default_maintainer "forktrial developers <forktrial@localhost>")
set(FORKTRIAL_MAINTAINER "" CACHE STRING
    "The package's Maintainer, \"Name <address>\" (empty: ${forktrial_default_maintainer})")
if(FORKTRIAL_MAINTAINER STREQUAL "")
  set(forktrial_maintainer ${forktrial_default_maintainer})
else()
  set(forktrial_maintainer ${FORKTRIAL_MAINTAINER})
endif()
if(NOT forktrial_maintainer MATCHES "^[^<>]*[^<> ] <[^<>@ ]+@[^<>@ ]+>$")
  message(FATAL_ERROR "FORKTRIAL_MAINTAINER is \"${forktrial_maintainer}\"; the package's \
Maintainer must be \"Name <address>\", e.g. \"${forktrial_default_maintainer}\"")
endif()
set(CPACK_PACKAGE_CONTACT ${forktrial_maintainer})

if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  include(GNUInstallDirs)
  # Debian's copyright file, in the machine-readable format
  # (https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/).
  install(FILES ${PROJECT_SOURCE_DIR}/deploy/debian/copyright DESTINATION ${CMAKE_INSTALL_DOCDIR})
  # Debian's changelog: one entry, for this version, dated by the last commit
  # (so that building the same commit twice gives the same file) or by
  # $SOURCE_DATE_EPOCH when it is set, and compressed without a name or a
  # time stamp (gzip -9n), as Debian's policy asks.
  if(NOT DEFINED ENV{SOURCE_DATE_EPOCH})
    execute_process(COMMAND git -C ${PROJECT_SOURCE_DIR} log -1 --format=%ct
                    OUTPUT_VARIABLE commit_time OUTPUT_STRIP_TRAILING_WHITESPACE
                    RESULT_VARIABLE git_failed ERROR_QUIET)
    if(NOT git_failed AND commit_time MATCHES "^[0-9]+$")
      set(ENV{SOURCE_DATE_EPOCH} ${commit_time})
    endif()
  endif()
  string(TIMESTAMP changelog_date "%a, %d %b %Y %H:%M:%S +0000" UTC)
  set(changelog ${PROJECT_BINARY_DIR}/changelog.Debian)
  file(WRITE ${changelog}
       "forktrial (${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}) unstable; urgency=medium\n"
       "\n"
       "  * forktrial ${PROJECT_VERSION}, built from its source tree with scripts/package.\n"
       "\n"
       " -- ${forktrial_maintainer}  ${changelog_date}\n")
  execute_process(COMMAND gzip -9n -c ${changelog} OUTPUT_FILE ${changelog}.gz
                  RESULT_VARIABLE gzip_failed)
  if(gzip_failed)
    message(FATAL_ERROR "gzip -9n ${changelog} failed: ${gzip_failed}")
  endif()
  install(FILES ${changelog}.gz DESTINATION ${CMAKE_INSTALL_DOCDIR})
endif()
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "trial plug-in packs against forks of recorded event logs, alone or on a cluster")
set(CPACK_PACKAGE_DESCRIPTION
    "forktrial runs proposed Lua plug-in packs against forks of recorded event logs, each trial \
in a fresh, resource-capped child process, and keeps every run and trial in an event store. \
On a cluster, a coordinator leases trials to workers over ZeroMQ; this package ships systemd \
units for both.")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SUGGESTS bash-completion)
# The Python package's Client speaks the wire with python3-zmq.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS python3-zmq)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/deploy/debian/postinst ${PROJECT_SOURCE_DIR}/deploy/debian/prerm
    ${PROJECT_SOURCE_DIR}/deploy/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
