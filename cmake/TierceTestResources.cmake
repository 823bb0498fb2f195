# cmake/TierceTestResources.cmake — how ctest shares this machine's CPUs between tests
# (docs/testing.md, "Scheduling").
#
# Two resources (tests/ctest-resources.json, CTEST_RESOURCE_SPEC_FILE: plain `ctest` uses it too):
#   cpu   2 slots. Every test takes one; a test that must have the machine to itself (RUN_SERIAL:
#         the cluster and fault tests, timing-sensitive ones) or runs two processes (PROCESSORS 2)
#         takes both, instead of RUN_SERIAL.
#   idle  2 slots, one per spin model check (^(dlm|coherence)_model_). The models take no cpu
#         slot: they run at SCHED_IDLE (chrt --idle 0), on the CPU time the others leave — a
#         cluster test leaves ~15 % of two cores idle (it waits on the network, the database,
#         sleeps), which used to be lost while the models waited for their own turn.
# `ctest -j4` (tools/test.sh): two tests (or a cluster test) and two models. The -j limit counts a
# model too, which is why the models have slots of their own: at -j3 three models could fill
# the -j limit and keep a cluster test waiting (seen here).
#
# add_test is wrapped (once, here) so that every test of the tree gets this without each
# directory saying it: the wrapper prefixes the models' command with chrt, and defers to the end
# of the test's directory (where its properties are final) the choice of its resource group.
set(CTEST_RESOURCE_SPEC_FILE ${PROJECT_SOURCE_DIR}/tests/ctest-resources.json)
set(TIERCE_IDLE_TESTS "^(dlm|coherence)_model_")

function(_tierce_test_resources name)
  if(name MATCHES "${TIERCE_IDLE_TESTS}")
    set_tests_properties(${name} PROPERTIES RESOURCE_GROUPS "idle:1")
    return()
  endif()
  get_test_property(${name} RESOURCE_GROUPS given)
  if(given)
    return()
  endif()
  get_test_property(${name} RUN_SERIAL serial)
  get_test_property(${name} PROCESSORS procs)
  if(serial OR (procs AND procs GREATER 1))
    set_tests_properties(${name} PROPERTIES RUN_SERIAL FALSE RESOURCE_GROUPS "cpu:2")
  else()
    set_tests_properties(${name} PROPERTIES RESOURCE_GROUPS "cpu:1")
  endif()
endfunction()

function(add_test)
  set(args ${ARGV})
  if(ARGC GREATER 3 AND ARGV0 STREQUAL "NAME" AND ARGV2 STREQUAL "COMMAND")
    if(ARGV1 MATCHES "${TIERCE_IDLE_TESTS}")
      list(INSERT args 3 chrt --idle 0)
    endif()
    _add_test(${args})
    # (EVAL: the name expanded now; a deferred call expands its arguments when it runs)
    cmake_language(EVAL CODE "cmake_language(DEFER CALL _tierce_test_resources [[${ARGV1}]])")
  else()
    _add_test(${args})
  endif()
endfunction()
