# Finds PHP's embed SAPI (Debian: libphp8.2-embed php8.2-dev). Provides PHP::embed (the embed
# library) and PHP::headers (includes only, for extensions); PHP_EXTENSION_DIR.
# `php-config --ldflags` names the extension dir, not the library: link libphp8.2 from /usr/lib.
find_program(PHP_CONFIG_EXECUTABLE NAMES php-config php-config8.2)
if(PHP_CONFIG_EXECUTABLE)
  execute_process(COMMAND ${PHP_CONFIG_EXECUTABLE} --includes
                  OUTPUT_VARIABLE PHP_INCLUDES OUTPUT_STRIP_TRAILING_WHITESPACE)
  execute_process(COMMAND ${PHP_CONFIG_EXECUTABLE} --version
                  OUTPUT_VARIABLE PHP_VERSION OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX MATCH "^[0-9]+\\.[0-9]+" PHP_SHORT_VERSION "${PHP_VERSION}")
  execute_process(COMMAND ${PHP_CONFIG_EXECUTABLE} --extension-dir
                  OUTPUT_VARIABLE PHP_EXTENSION_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
find_library(PHP_EMBED_LIBRARY NAMES php${PHP_SHORT_VERSION} php PATHS /usr/lib /usr/lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PHPEmbed
  REQUIRED_VARS PHP_CONFIG_EXECUTABLE PHP_EMBED_LIBRARY
  FAIL_MESSAGE "PHP embed not found: apt-get install libphp8.2-embed php8.2-dev")
if(PHPEmbed_FOUND AND NOT TARGET PHP::embed)
  add_library(PHP::embed UNKNOWN IMPORTED)
  separate_arguments(_php_inc UNIX_COMMAND "${PHP_INCLUDES}")
  string(REPLACE "-I" "" _php_inc "${_php_inc}")
  set_target_properties(PHP::embed PROPERTIES IMPORTED_LOCATION ${PHP_EMBED_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES "${_php_inc}")
  # Headers only: what an extension compiles against (it links nothing of PHP: the SAPI that
  # loads it provides the symbols).
  add_library(PHP::headers INTERFACE IMPORTED)
  set_target_properties(PHP::headers PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_php_inc}")
endif()
