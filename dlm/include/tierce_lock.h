/* tierce_lock.h — the C API of the Tierce lock manager (for Apache modules and C programs).
 * Link with -ltierce_lock (CMake target tierce::lock_c). Thread-safe per client handle; never use
 * a handle across fork(). Semantics as the C++ API (dlm/client.h) and docs/dlm.md.
 *
 *   char err[256];
 *   tierce_lock_client *c = tierce_lock_connect(NULL, err, sizeof err);   // NULL: default socket
 *   uint64_t hold, token;
 *   int rc = tierce_lock_acquire(c, "orders", TIERCE_LOCK_EXCLUSIVE, 5000, &hold, &token);
 *   if (rc == TIERCE_LOCK_OK) { ...; tierce_lock_release(c, hold); }
 *   else fprintf(stderr, "%s\n", tierce_lock_strerror(rc));
 *   tierce_lock_close(c);
 */
#ifndef TIERCE_LOCK_H
#define TIERCE_LOCK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tierce_lock_client tierce_lock_client;

enum tierce_lock_mode { TIERCE_LOCK_SHARED = 1, TIERCE_LOCK_EXCLUSIVE = 2 };

/* Return codes: the values of tierce::dlm::Status. */
enum tierce_lock_status {
  TIERCE_LOCK_OK = 0,
  TIERCE_LOCK_TIMEOUT = 1,
  TIERCE_LOCK_WOULDBLOCK = 2,
  TIERCE_LOCK_NOTHELD = 3,
  TIERCE_LOCK_HOMEDOWN = 4,
  TIERCE_LOCK_BADNAME = 5,
  TIERCE_LOCK_LEASELOST = 6,
  TIERCE_LOCK_TOOMANY = 7,
  TIERCE_LOCK_SHUTTINGDOWN = 8,
  TIERCE_LOCK_BADREQUEST = 9,
  TIERCE_LOCK_INTERNAL = 10
};

/* socket_path NULL: $TIERCE_LOCKD_SOCKET, else /run/tierce/lockd.sock. Returns NULL on failure
 * with the reason in err (when err is not NULL). */
tierce_lock_client *tierce_lock_connect(const char *socket_path, char *err, size_t errlen);
/* Closes the connection; lockd releases what the handle still holds. NULL is allowed. */
void tierce_lock_close(tierce_lock_client *c);

/* timeout_ms < 0: wait forever; 0: try-lock (TIERCE_LOCK_WOULDBLOCK unless granted at once).
 * On TIERCE_LOCK_OK, *hold and *token are set (either may be NULL). */
int tierce_lock_acquire(tierce_lock_client *c, const char *name, int mode, int timeout_ms,
                        uint64_t *hold, uint64_t *token);
int tierce_lock_release(tierce_lock_client *c, uint64_t hold);

/* The next revoked hold (TIERCE_LOCK_OK and *hold set), or TIERCE_LOCK_WOULDBLOCK when none.
 * Taking it acknowledges the revocation: lockd keeps the lock held at its home until then (or
 * lease_ms), so call it as soon as the event fd polls readable, and stop using the hold. */
int tierce_lock_next_revoked(tierce_lock_client *c, uint64_t *hold);
/* A descriptor that polls readable while a revocation waits. */
int tierce_lock_event_fd(const tierce_lock_client *c);

/* A static text for a status code. */
const char *tierce_lock_strerror(int status);
/* The message of the last failure on this handle in this thread ("" when none). */
const char *tierce_lock_last_error(const tierce_lock_client *c);

#ifdef __cplusplus
}
#endif
#endif /* TIERCE_LOCK_H */
