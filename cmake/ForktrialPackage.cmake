# The Debian package (cpack -G DEB, run by scripts/package): forktrial,
# forktrial-child, the systemd units with example environment files, the man
# pages and bash completion (deploy/CMakeLists.txt installs them). Its
# dependencies are read from the binaries by dpkg-shlibdeps.
set(CPACK_PACKAGE_NAME forktrial)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)

# The Maintainer field: whoever builds and ships the package
# (scripts/package passes $FORKTRIAL_MAINTAINER); empty means the project's
# default.
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
