# Finds Apache's build flags through apxs (Debian: apache2-dev libapr1-dev libaprutil1-dev).
# Provides APXS::httpd (include dirs + defines for module code) and APXS_LIBEXECDIR.
# Note: `apxs -c` ignores .cpp files, so modules are built by CMake with these flags instead.
find_program(APXS_EXECUTABLE NAMES apxs apxs2 PATHS /usr/bin /usr/sbin)
if(APXS_EXECUTABLE)
  foreach(var INCLUDEDIR APR_INCLUDEDIR EXTRA_CPPFLAGS LIBEXECDIR)
    execute_process(COMMAND ${APXS_EXECUTABLE} -q ${var}
                    OUTPUT_VARIABLE APXS_${var} OUTPUT_STRIP_TRAILING_WHITESPACE)
  endforeach()
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(APR QUIET IMPORTED_TARGET apr-1 apr-util-1)
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(APXS
  REQUIRED_VARS APXS_EXECUTABLE APXS_INCLUDEDIR APR_FOUND
  FAIL_MESSAGE "apxs/APR not found: apt-get install apache2-dev libapr1-dev libaprutil1-dev")
if(APXS_FOUND AND NOT TARGET APXS::httpd)
  add_library(APXS::httpd INTERFACE IMPORTED)
  separate_arguments(_apxs_cppflags UNIX_COMMAND "${APXS_EXTRA_CPPFLAGS}")
  target_include_directories(APXS::httpd INTERFACE ${APXS_INCLUDEDIR} ${APXS_APR_INCLUDEDIR})
  target_compile_options(APXS::httpd INTERFACE ${_apxs_cppflags})
  target_link_libraries(APXS::httpd INTERFACE PkgConfig::APR)
endif()
