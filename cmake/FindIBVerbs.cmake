# FindIBVerbs — rdma-core's libibverbs and librdmacm.
#
# Defines IBVerbs_FOUND, IBVerbs_VERSION and the imported targets IBVerbs::ibverbs and IBVerbs::rdmacm.
# rdma-core ships pkg-config files only; those give hints, find_path/find_library do the finding.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(PC_IBVERBS QUIET libibverbs)
  pkg_check_modules(PC_RDMACM QUIET librdmacm)
endif()

find_path(IBVerbs_INCLUDE_DIR infiniband/verbs.h HINTS ${PC_IBVERBS_INCLUDE_DIRS})
find_library(IBVerbs_LIBRARY ibverbs HINTS ${PC_IBVERBS_LIBRARY_DIRS})
find_path(IBVerbs_RDMACM_INCLUDE_DIR rdma/rdma_cma.h HINTS ${PC_RDMACM_INCLUDE_DIRS})
find_library(IBVerbs_RDMACM_LIBRARY rdmacm HINTS ${PC_RDMACM_LIBRARY_DIRS})
set(IBVerbs_VERSION ${PC_IBVERBS_VERSION})

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(IBVerbs
  REQUIRED_VARS IBVerbs_LIBRARY IBVerbs_INCLUDE_DIR IBVerbs_RDMACM_LIBRARY IBVerbs_RDMACM_INCLUDE_DIR
  VERSION_VAR IBVerbs_VERSION)

if(IBVerbs_FOUND AND NOT TARGET IBVerbs::ibverbs)
  add_library(IBVerbs::ibverbs UNKNOWN IMPORTED)
  set_target_properties(IBVerbs::ibverbs PROPERTIES IMPORTED_LOCATION "${IBVerbs_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${IBVerbs_INCLUDE_DIR}")
  add_library(IBVerbs::rdmacm UNKNOWN IMPORTED)
  set_target_properties(IBVerbs::rdmacm PROPERTIES IMPORTED_LOCATION "${IBVerbs_RDMACM_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${IBVerbs_RDMACM_INCLUDE_DIR}"
                        INTERFACE_LINK_LIBRARIES IBVerbs::ibverbs)
endif()
mark_as_advanced(IBVerbs_INCLUDE_DIR IBVerbs_LIBRARY IBVerbs_RDMACM_INCLUDE_DIR IBVerbs_RDMACM_LIBRARY)
