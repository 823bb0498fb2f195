/* tests/dlm/client/c_api_probe.c — a C program using libtierce_lock.so the way an Apache module
 * would (it is compiled as C and links only the shared library). Run by cli_test against an
 * IpcServer: checks acquire/try/timeout/release, argument errors, last_error, strerror; then
 * prints "HOLD <id>" and waits (poll on the event fd) for the test to revoke that hold.
 * Exit 0 and "OK" on stdout when every check passed; otherwise the failed check on stderr. */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "tierce_lock.h"

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "c_api_probe: line %d: check failed: %s\n", __LINE__, #cond); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

int main(int argc, char** argv) {
  char err[256];
  uint64_t hold = 0, token = 0, h2 = 0, t2 = 0, rh = 0;
  tierce_lock_client *a, *b;
  int s;
  struct pollfd p;

  if (argc != 2) {
    fprintf(stderr, "usage: c_api_probe SOCKET\n");
    return 2;
  }
  CHECK(tierce_lock_connect("/nonexistent-dir/lockd.sock", err, sizeof err) == NULL);
  CHECK(strstr(err, "/nonexistent-dir/lockd.sock") != NULL);
  CHECK(tierce_lock_connect("/nonexistent-dir/lockd.sock", NULL, 0) == NULL);

  a = tierce_lock_connect(argv[1], err, sizeof err);
  CHECK(a != NULL);
  b = tierce_lock_connect(argv[1], err, sizeof err);
  CHECK(b != NULL);
  CHECK(strcmp(tierce_lock_last_error(a), "") == 0);

  CHECK(tierce_lock_acquire(a, "c-api", TIERCE_LOCK_EXCLUSIVE, 1000, &hold, &token) ==
        TIERCE_LOCK_OK);
  CHECK(hold != 0 && token > 1000);
  CHECK(tierce_lock_acquire(b, "c-api", TIERCE_LOCK_SHARED, 0, &h2, &t2) == TIERCE_LOCK_WOULDBLOCK);
  CHECK(strstr(tierce_lock_last_error(b), "c-api") != NULL);
  CHECK(strcmp(tierce_lock_last_error(a), "") == 0); /* per handle */
  CHECK(tierce_lock_acquire(b, "c-api", TIERCE_LOCK_SHARED, 100, &h2, &t2) == TIERCE_LOCK_TIMEOUT);
  CHECK(tierce_lock_release(a, hold) == TIERCE_LOCK_OK);
  CHECK(tierce_lock_release(a, hold) == TIERCE_LOCK_NOTHELD);
  CHECK(strlen(tierce_lock_last_error(a)) > 0);
  /* a's release is one-way on a's connection: b waits for it rather than try-locking. */
  CHECK(tierce_lock_acquire(b, "c-api", TIERCE_LOCK_SHARED, 5000, &h2, &t2) == TIERCE_LOCK_OK);
  CHECK(t2 > token);
  CHECK(tierce_lock_acquire(a, "c-api", TIERCE_LOCK_SHARED, -1, NULL, NULL) == TIERCE_LOCK_OK);

  CHECK(tierce_lock_acquire(a, "c-api-x", 3, 0, NULL, NULL) == TIERCE_LOCK_BADREQUEST);
  CHECK(tierce_lock_acquire(a, "", TIERCE_LOCK_SHARED, 0, NULL, NULL) == TIERCE_LOCK_BADNAME);
  CHECK(tierce_lock_acquire(a, NULL, TIERCE_LOCK_SHARED, 0, NULL, NULL) == TIERCE_LOCK_BADNAME);
  CHECK(tierce_lock_acquire(NULL, "x", TIERCE_LOCK_SHARED, 0, NULL, NULL) ==
        TIERCE_LOCK_BADREQUEST);
  CHECK(tierce_lock_release(NULL, 1) == TIERCE_LOCK_BADREQUEST);
  for (s = TIERCE_LOCK_OK; s <= TIERCE_LOCK_INTERNAL; ++s)
    CHECK(strlen(tierce_lock_strerror(s)) > 0);
  CHECK(strcmp(tierce_lock_strerror(99), "unknown status") == 0);
  CHECK(strcmp(tierce_lock_last_error(NULL), "") == 0);
  CHECK(tierce_lock_event_fd(NULL) == -1);

  /* Revocation, through the event fd as a poll loop would. */
  CHECK(tierce_lock_event_fd(a) >= 0);
  CHECK(tierce_lock_next_revoked(a, &rh) == TIERCE_LOCK_WOULDBLOCK);
  CHECK(tierce_lock_acquire(a, "c-api-rev", TIERCE_LOCK_EXCLUSIVE, -1, &hold, &token) ==
        TIERCE_LOCK_OK);
  printf("HOLD %llu\n", (unsigned long long)hold);
  fflush(stdout);
  p.fd = tierce_lock_event_fd(a);
  p.events = POLLIN;
  p.revents = 0;
  CHECK(poll(&p, 1, 10000) == 1);
  CHECK(tierce_lock_next_revoked(a, &rh) == TIERCE_LOCK_OK);
  CHECK(rh == hold);
  CHECK(tierce_lock_next_revoked(a, &rh) == TIERCE_LOCK_WOULDBLOCK);
  p.revents = 0;
  CHECK(poll(&p, 1, 0) == 0); /* drained: quiet */
  CHECK(tierce_lock_release(a, hold) == TIERCE_LOCK_NOTHELD);

  tierce_lock_close(b); /* b's shared hold goes with it */
  tierce_lock_close(a);
  tierce_lock_close(NULL);
  printf("OK\n");
  return 0;
}
