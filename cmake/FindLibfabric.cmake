# FindLibfabric — libfabric (OFI).
#
# Defines Libfabric_FOUND, Libfabric_VERSION and the imported target Libfabric::fabric.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_LIBFABRIC QUIET libfabric)
endif()

find_path(Libfabric_INCLUDE_DIR rdma/fabric.h HINTS ${PC_LIBFABRIC_INCLUDE_DIRS})
find_library(Libfabric_LIBRARY fabric HINTS ${PC_LIBFABRIC_LIBRARY_DIRS})
set(Libfabric_VERSION ${PC_LIBFABRIC_VERSION})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Libfabric REQUIRED_VARS Libfabric_LIBRARY Libfabric_INCLUDE_DIR
                                  VERSION_VAR Libfabric_VERSION)

if(Libfabric_FOUND AND NOT TARGET Libfabric::fabric)
  add_library(Libfabric::fabric UNKNOWN IMPORTED)
  set_target_properties(Libfabric::fabric PROPERTIES IMPORTED_LOCATION "${Libfabric_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${Libfabric_INCLUDE_DIR}")
endif()
mark_as_advanced(Libfabric_INCLUDE_DIR Libfabric_LIBRARY)
