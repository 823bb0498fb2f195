# Finds rdma-core's verbs and connection manager (Debian: libibverbs-dev librdmacm-dev).
# Provides RdmaCore::RdmaCore. The verbs backend is always compiled, device or not.
find_package(PkgConfig REQUIRED)
pkg_check_modules(RDMACORE QUIET IMPORTED_TARGET libibverbs librdmacm)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(RdmaCore
  REQUIRED_VARS RDMACORE_FOUND
  FAIL_MESSAGE "rdma-core not found: apt-get install libibverbs-dev librdmacm-dev")
if(RdmaCore_FOUND AND NOT TARGET RdmaCore::RdmaCore)
  add_library(RdmaCore::RdmaCore ALIAS PkgConfig::RDMACORE)
endif()
