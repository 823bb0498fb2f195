# Finds MySQL Connector/C++ 1.1 (JDBC-style API; Debian: libmysqlcppconn-dev), which ships no CMake
# package. Provides MySQL::ConnectorCpp.
find_path(MYSQLCPPCONN_INCLUDE_DIR mysql_driver.h PATH_SUFFIXES cppconn)
find_library(MYSQLCPPCONN_LIBRARY mysqlcppconn)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(MySQLConnectorCpp
  REQUIRED_VARS MYSQLCPPCONN_LIBRARY MYSQLCPPCONN_INCLUDE_DIR
  FAIL_MESSAGE "Connector/C++ not found: apt-get install libmysqlcppconn-dev")
if(MySQLConnectorCpp_FOUND AND NOT TARGET MySQL::ConnectorCpp)
  add_library(MySQL::ConnectorCpp UNKNOWN IMPORTED)
  set_target_properties(MySQL::ConnectorCpp PROPERTIES IMPORTED_LOCATION ${MYSQLCPPCONN_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${MYSQLCPPCONN_INCLUDE_DIR})
endif()
