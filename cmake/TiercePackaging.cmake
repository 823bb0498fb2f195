# cmake/TiercePackaging.cmake — Debian packages with CPack (docs/packaging.md):
#   cd build && cpack -G DEB    -> tierce-agents_, libapache2-mod-tierce_, tierce-ftp_, php8.2-tierce_,
#                                  libtierce-lock0_, libtierce-lock-dev_, tierce-sample_<version>-1_amd64.deb
# One CPack component per package; the install() rules of the folders name their component
# (agents, apache, ftp, php, lock, lockdev, sample). What only the packages need (Apache
# .load/.conf, /etc/tierce, systemd units, maintainer scripts) lives in packaging/.
#
# Why CPack rather than dpkg-buildpackage: the build is CMake's and already knows what goes where
# (APXS_LIBEXECDIR, PHP_EXTENSION_DIR, the install rules), one `cpack` makes four packages from
# the build tree the tests use, and there is no second build description (debian/rules) to keep in
# step. What debhelper would do for us is written out here: conffiles (CPack does NOT mark /etc
# files as conffiles: packaging/debian/*/conffiles), the systemd/apache2/php maintainer-script
# snippets (packaging/debian/*/post*, pre*), stripping, shlibs, changelog and copyright.
#
# lintian (test `packages_install` runs it on every .deb and fails on any error or warning not
# listed, with its reason, in packaging/lintian-accepted.txt). What remains:
#   (no-manual-page is gone: help2man makes them, above)
#   initial-upload-closes-no-bugs         the changelog is generated; these packages are not
#                                         uploaded to Debian, there is no ITP bug to close
#   non-standard-apache2-module-package-name  one package carries both modules (libapache2-mod-
#                                         tierce, not -rcache and -appversion): they are two
#                                         halves of one protocol, same version on both tiers
#   maintainer-script-empty (libtierce-lock0)  CPack adds postinst/postrm that call ldconfig to a
#                                         package with a library in /usr/lib unless it has its own;
#                                         ours are empty and ldconfig runs through the triggers
#                                         file (the direct call is lintian's maintscript-calls-ldconfig)
include(GNUInstallDirs)

set(TIERCE_PACKAGE_MAINTAINER "Tierce maintainers <maintainers@users.noreply.a-seed-c7c24193.example>"
    CACHE STRING "Maintainer field of the Debian packages")
set(TIERCE_PACKAGE_HOMEPAGE "https://a-seed-c7c24193.example/tierce"
    CACHE STRING "Homepage field of the Debian packages (a placeholder until the project has one)")
set(TIERCE_PHP_PACKAGE "php${PHP_SHORT_VERSION}-tierce")
if(PHP_EXTENSION_DIR)
  get_filename_component(PHP_API_VERSION "${PHP_EXTENSION_DIR}" NAME)  # /usr/lib/php/20220829
endif()

set(_pkg ${PROJECT_SOURCE_DIR}/packaging)

# --- files only the packages carry -------------------------------------------------------------
# EXCLUDE_FROM_ALL: installed by cpack (per component) only, never by a plain `cmake --install`,
# which must not overwrite a hand-made /etc/tierce or drop units and Apache confs into the system.
if(APXS_FOUND)
  install(FILES ${_pkg}/apache2/rcache.load ${_pkg}/apache2/rcache.conf
                ${_pkg}/apache2/appversion.load ${_pkg}/apache2/appversion.conf
          DESTINATION /etc/apache2/mods-available COMPONENT apache EXCLUDE_FROM_ALL)
  install(FILES ${PROJECT_SOURCE_DIR}/conf/proxy.conf.in ${PROJECT_SOURCE_DIR}/conf/app.conf.in
          DESTINATION ${CMAKE_INSTALL_DATADIR}/tierce/apache2 COMPONENT apache EXCLUDE_FROM_ALL)
endif()
install(FILES ${_pkg}/etc/cluster.toml ${_pkg}/etc/memd.toml ${_pkg}/etc/writer.toml ${_pkg}/etc/lockd.toml
              ${_pkg}/etc/binlogd.toml
        DESTINATION /etc/tierce COMPONENT agents EXCLUDE_FROM_ALL)
install(FILES ${PROJECT_SOURCE_DIR}/conf/cluster.toml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/tierce/conf COMPONENT agents EXCLUDE_FROM_ALL)
install(FILES ${_pkg}/systemd/tierce-memd.service ${_pkg}/systemd/tierce-writer.service
              ${_pkg}/systemd/tierce-lockd.service ${_pkg}/systemd/tierce-binlogd.service
        DESTINATION /lib/systemd/system COMPONENT agents EXCLUDE_FROM_ALL)
install(FILES ${_pkg}/etc/ftpd.toml DESTINATION /etc/tierce COMPONENT ftp EXCLUDE_FROM_ALL)
install(FILES ${_pkg}/systemd/tierce-ftpd.service DESTINATION /lib/systemd/system COMPONENT ftp EXCLUDE_FROM_ALL)

# Man pages, made by help2man from each program's --help and --version (tools/deps.sh installs
# help2man; without it the packages go without, and lintian says no-manual-page). Not in a
# sanitizer build, whose programs would run under ASan at build time. Packages only, like /etc.
find_program(HELP2MAN help2man)
set(TIERCE_MAN_PAGES "")
if(HELP2MAN AND NOT TIERCE_ANY_SANITIZER)
  set(_man
      "tierce-memd|8|agents|Tierce node daemon: region exporter, home of cached page versions"
      "tierce-lockd|8|agents|Tierce lock manager daemon"
      "tierce-binlogd|8|agents|Tierce cache invalidation from the MariaDB binlog"
      "tierce-ftpd|8|ftp|Tierce FTP and FTPS server with ADTS data sessions"
      "tierce-ftp|1|ftp|Tierce FTP client: get, put, resume and mirror trees"
      "tierce-lock|1|agents|run a command under a cluster-wide Tierce lock"
      "tierce-check|1|agents|strong-coherence checker of a site cached by Tierce"
      "tierce-fabric|1|agents|Tierce fabric client: regions, reads, writes and atomics"
      "tierce-wanem|1|agents|user-space WAN emulator relay: delay, rate and cuts per link"
      "tierce-datagen|1|sample|load the database of the Tierce sample auction site")
  foreach(entry ${_man})
    string(REPLACE "|" ";" f "${entry}")
    list(GET f 0 prog)
    list(GET f 1 sec)
    list(GET f 2 comp)
    list(GET f 3 what)
    if(NOT TARGET ${prog})
      continue()
    endif()
    set(out ${CMAKE_BINARY_DIR}/man/${prog}.${sec}.gz)
    add_custom_command(OUTPUT ${out}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
      COMMAND sh -c "'${HELP2MAN}' --no-info --no-discard-stderr --section=${sec} --name='${what}' --source=Tierce --version-option=--version '$<TARGET_FILE:${prog}>' | gzip -9n > '${out}.tmp' && mv '${out}.tmp' '${out}'"
      DEPENDS ${prog} VERBATIM
      COMMENT "help2man ${prog}.${sec}")
    list(APPEND TIERCE_MAN_PAGES ${out})
    install(FILES ${out} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${sec} COMPONENT ${comp} EXCLUDE_FROM_ALL)
  endforeach()
  add_custom_target(man_pages ALL DEPENDS ${TIERCE_MAN_PAGES})
endif()

# /usr/share/doc/<package>: copyright, changelog.Debian.gz and the reference each one needs.
set(_docs_agents docs/memd.md docs/dlm.md docs/coherence.md docs/packaging.md docs/ARCHITECTURE.md
    docs/OPERATIONS.md)
set(_docs_apache mod_rcache/README.md mod_appversion/README.md docs/coherence.md docs/packaging.md)
set(_docs_ftp docs/ftp.md docs/packaging.md)
set(_docs_php docs/php_extension.md docs/packaging.md)
set(_docs_lock docs/dlm.md)
set(_docs_lockdev docs/dlm.md)
set(_docs_sample sample/README.md)
string(TIMESTAMP _now "%a, %d %b %Y %H:%M:%S +0000" UTC)
foreach(comp agents apache ftp php lock lockdev sample)
  if(comp STREQUAL "agents")
    set(name tierce-agents)
  elseif(comp STREQUAL "lock")
    set(name libtierce-lock0)
  elseif(comp STREQUAL "lockdev")
    set(name libtierce-lock-dev)
  elseif(comp STREQUAL "apache")
    set(name libapache2-mod-tierce)
  elseif(comp STREQUAL "ftp")
    set(name tierce-ftp)
  elseif(comp STREQUAL "sample")
    set(name tierce-sample)
  else()
    set(name ${TIERCE_PHP_PACKAGE})
  endif()
  set(TIERCE_PACKAGE_NAME_${comp} ${name})
  set(dir ${CMAKE_BINARY_DIR}/packaging/${comp})
  file(MAKE_DIRECTORY ${dir})
  file(WRITE ${dir}/changelog.Debian
       "${name} (${PROJECT_VERSION}-1) unstable; urgency=medium\n\n"
       "  * Built from the Tierce source tree with CPack (docs/packaging.md).\n\n"
       " -- ${TIERCE_PACKAGE_MAINTAINER}  ${_now}\n")
  execute_process(COMMAND gzip -9nf ${dir}/changelog.Debian)
  foreach(d ${_docs_${comp}})
    list(APPEND _doc_files_${comp} ${PROJECT_SOURCE_DIR}/${d})
  endforeach()
  if(comp STREQUAL "apache")
    # Two READMEs: give them the module's name.
    list(REMOVE_ITEM _doc_files_apache ${PROJECT_SOURCE_DIR}/mod_rcache/README.md
                                         ${PROJECT_SOURCE_DIR}/mod_appversion/README.md)
    install(FILES ${PROJECT_SOURCE_DIR}/mod_rcache/README.md
            DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name} RENAME mod_rcache.md COMPONENT apache EXCLUDE_FROM_ALL)
    install(FILES ${PROJECT_SOURCE_DIR}/mod_appversion/README.md
            DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name} RENAME mod_appversion.md COMPONENT apache EXCLUDE_FROM_ALL)
  endif()
  install(FILES ${_pkg}/copyright ${dir}/changelog.Debian.gz ${_doc_files_${comp}}
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${name} COMPONENT ${comp} EXCLUDE_FROM_ALL)
endforeach()

# --- CPack ---------------------------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tierce)
set(CPACK_PACKAGE_VENDOR "Tierce")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${TIERCE_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL agents ftp lock lockdev)
if(APXS_FOUND)
  list(APPEND CPACK_COMPONENTS_ALL apache)
endif()
if(TARGET php_tierce)
  list(APPEND CPACK_COMPONENTS_ALL php)
endif()
if(TARGET tierce-datagen)
  list(APPEND CPACK_COMPONENTS_ALL sample)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE amd64)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${TIERCE_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "${TIERCE_PACKAGE_HOMEPAGE}")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(_v "${PROJECT_VERSION}-1")

set(CPACK_DEBIAN_AGENTS_PACKAGE_NAME tierce-agents)
set(CPACK_DEBIAN_AGENTS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_AGENTS_PACKAGE_DEPENDS "adduser, init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_AGENTS_DESCRIPTION "Tierce node agents: tierce-memd, tierce-lockd, tierce-binlogd and tools
Tierce makes multi-tier web sites fast and correct: proxies cache dynamic pages
with strong coherence, nodes share cache memory, lock across nodes and
replicate sites. This package holds the node daemons, tierce-memd (region
exporter and home of the cached pages' versions), tierce-lockd (the lock
manager) and tierce-binlogd (invalidates the pages that writes made outside
the application change, read from the MariaDB binlog), with systemd units,
and the tools tierce-lock, tierce-check, tierce-fabric and tierce-wanem.
/etc/tierce holds a single-host configuration.")
set(CPACK_DEBIAN_AGENTS_PACKAGE_CONTROL_EXTRA
    "${_pkg}/debian/agents/postinst;${_pkg}/debian/agents/prerm;${_pkg}/debian/agents/postrm;${_pkg}/debian/agents/conffiles")

set(CPACK_DEBIAN_LOCK_PACKAGE_NAME libtierce-lock0)
set(CPACK_DEBIAN_LOCK_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_LOCK_DESCRIPTION "Tierce lock manager client library (C API)
libtierce_lock is the C API of the Tierce lock manager: cluster-wide locks
served by the node's tierce-lockd (package tierce-agents), for Apache modules
and C programs.")
# shlibs written here: CPack's GENERATE_SHLIBS is global and warns about every module without a
# SONAME (the Apache modules, the PHP extension).
configure_file(${_pkg}/debian/lock/shlibs.in ${CMAKE_BINARY_DIR}/packaging/lock-control/shlibs @ONLY)
set(CPACK_DEBIAN_LOCK_PACKAGE_CONTROL_EXTRA
    "${_pkg}/debian/lock/postinst;${_pkg}/debian/lock/postrm;${_pkg}/debian/lock/triggers;${CMAKE_BINARY_DIR}/packaging/lock-control/shlibs")
set(CPACK_DEBIAN_LOCKDEV_PACKAGE_NAME libtierce-lock-dev)
set(CPACK_DEBIAN_LOCKDEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_LOCKDEV_PACKAGE_DEPENDS "libtierce-lock0 (= ${_v})")
set(CPACK_DEBIAN_LOCKDEV_DESCRIPTION "Tierce lock manager client library (development files)
The header tierce_lock.h and the link libtierce_lock.so of the C API of the
Tierce lock manager (docs/dlm.md).")

set(CPACK_DEBIAN_APACHE_PACKAGE_NAME libapache2-mod-tierce)
set(CPACK_DEBIAN_APACHE_PACKAGE_SECTION httpd)
# The .conf files name /etc/tierce/cluster.toml and the secret of tierce-agents, and the pages'
# versions live in its tierce-memd.
set(CPACK_DEBIAN_APACHE_PACKAGE_DEPENDS "apache2-api-20120211, apache2-bin (>= 2.4.16), tierce-agents (= ${_v})")
set(CPACK_DEBIAN_APACHE_DESCRIPTION "Tierce Apache modules: coherent dynamic-page cache
mod_rcache (proxy tier) caches dynamic pages in shared memory and serves a
copy only after one one-sided read of the page's version at its home app
node proves it current; mod_appversion (app tier) tags the pages with their
versions and makes an update wait until every cached copy is invalid.
Enable both on one host with: a2enmod rcache appversion (a cache on port
6081 in front of this httpd's sites).")
set(CPACK_DEBIAN_APACHE_PACKAGE_CONTROL_EXTRA
    "${_pkg}/debian/apache/prerm;${_pkg}/debian/apache/postrm;${_pkg}/debian/apache/conffiles")

set(CPACK_DEBIAN_FTP_PACKAGE_NAME tierce-ftp)
set(CPACK_DEBIAN_FTP_PACKAGE_SECTION net)
set(CPACK_DEBIAN_FTP_PACKAGE_DEPENDS "init-system-helpers (>= 1.54~)")
set(CPACK_DEBIAN_FTP_DESCRIPTION "Tierce site replication: tierce-ftpd and tierce-ftp
tierce-ftpd is a pre-forked FTP/FTPS server with privilege separation and
ADTS data sessions (zero-copy TCP, parallel TCP, RDMA verbs); tierce-ftp gets,
puts, resumes and mirrors trees with it. A systemd unit is included.")
set(CPACK_DEBIAN_FTP_PACKAGE_CONTROL_EXTRA
    "${_pkg}/debian/ftp/postinst;${_pkg}/debian/ftp/prerm;${_pkg}/debian/ftp/postrm;${_pkg}/debian/ftp/conffiles")

set(CPACK_DEBIAN_PHP_PACKAGE_NAME ${TIERCE_PHP_PACKAGE})
set(CPACK_DEBIAN_PHP_PACKAGE_SECTION php)
set(CPACK_DEBIAN_PHP_PACKAGE_DEPENDS "phpapi-${PHP_API_VERSION}, php${PHP_SHORT_VERSION}-common")
set(CPACK_DEBIAN_PHP_PACKAGE_RECOMMENDS "tierce-agents (= ${_v}), libapache2-mod-tierce (= ${_v})")
set(CPACK_DEBIAN_PHP_DESCRIPTION "Tierce PHP extension: cache dependencies from SQL, locks
Derives the cache dependencies and invalidations of the Tierce coherent page
cache from the SQL an application runs (mysqli, PDO), offers a linearizable
mode, and the lock manager's locks to PHP (tierce_lock). Enabled for every
SAPI; it does nothing until configured in tierce.ini.")
set(CPACK_DEBIAN_SAMPLE_PACKAGE_NAME tierce-sample)
set(CPACK_DEBIAN_SAMPLE_PACKAGE_SECTION web)
set(CPACK_DEBIAN_SAMPLE_PACKAGE_DEPENDS "php${PHP_SHORT_VERSION}-mysql")
set(CPACK_DEBIAN_SAMPLE_PACKAGE_RECOMMENDS "libapache2-mod-php${PHP_SHORT_VERSION}, mariadb-server | default-mysql-server")
set(CPACK_DEBIAN_SAMPLE_DESCRIPTION "Tierce sample application: an auction site with its data generator
A small RUBiS-like auction site (PHP pages over MariaDB) that names its
cache dependencies, used to try, test and benchmark Tierce: the pages in
/usr/share/tierce/sample/php (a document root), the schema in
/usr/share/tierce/sample/schema.sql and tierce-datagen, which loads a
database with categories, users, items and bids. The container images in
docker/ of the source tree are built from it.")

# The PHP version is the build's (8.2 on Debian 12): the scripts are configured with it.
foreach(f postinst postrm conffiles)
  configure_file(${_pkg}/debian/php/${f}.in ${CMAKE_BINARY_DIR}/packaging/php-control/${f} @ONLY
                 FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
                                  WORLD_READ WORLD_EXECUTE)
endforeach()
set(_phpc ${CMAKE_BINARY_DIR}/packaging/php-control)
set(CPACK_DEBIAN_PHP_PACKAGE_CONTROL_EXTRA "${_phpc}/postinst;${_phpc}/postrm;${_phpc}/conffiles")

include(CPack)
