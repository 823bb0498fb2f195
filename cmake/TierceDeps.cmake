# Every external dependency is a Debian package; this file finds them all in one place and says
# which package to install when one is missing.
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)

find_package(OpenSSL REQUIRED)                          # libssl-dev: HMAC challenge-response, RNG
find_package(Boost 1.74 CONFIG REQUIRED COMPONENTS unit_test_framework)   # libboost-test-dev
pkg_check_modules(TOMLPP REQUIRED IMPORTED_TARGET tomlplusplus)           # libtomlplusplus-dev
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)           # libxxhash-dev: coop_slot checksums (XXH3-64)
pkg_check_modules(MARIADB REQUIRED IMPORTED_TARGET libmariadb)         # libmariadb-dev: memd, the fence's arbiter
find_package(RdmaCore REQUIRED)                         # libibverbs-dev librdmacm-dev
find_package(APXS)                                      # apache2-dev (Apache modules, later floors)
find_package(PHPEmbed)                                  # libphp8.2-embed php8.2-dev
find_package(MySQLConnectorCpp)                         # libmysqlcppconn-dev
