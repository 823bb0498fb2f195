// dlm/c_api.cc — the C API (dlm/include/tierce_lock.h) over LockClient. No exception crosses
// the C boundary: each becomes a status code, its message kept per handle and per thread.
#include "dlm/include/tierce_lock.h"

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <unordered_map>

#include "dlm/client.h"

using tierce::dlm::LockClient;
using tierce::dlm::LockError;
using tierce::dlm::Mode;
using tierce::dlm::Status;

struct tierce_lock_client {
  explicit tierce_lock_client(const std::string& path) : client(path) {}
  LockClient client;
  // Last failure per thread. Nodes of an unordered_map never move: the c_str() handed out stays
  // valid until that thread's next failure on this handle.
  mutable std::mutex err_mu;
  mutable std::unordered_map<std::thread::id, std::string> errors;

  int fail(int status, const char* what) {
    std::lock_guard g(err_mu);
    errors[std::this_thread::get_id()] = what;
    return status;
  }
};

namespace {

void copy_err(char* err, size_t errlen, const char* msg) {
  if (err && errlen > 0) std::snprintf(err, errlen, "%s", msg);
}

// Runs f(), turning exceptions into status codes recorded on the handle.
template <class F>
int guarded(tierce_lock_client* c, F&& f) {
  try {
    return f();
  } catch (const LockError& e) {
    return c->fail(int(e.status()), e.what());
  } catch (const std::bad_alloc&) {
    return c->fail(TIERCE_LOCK_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return c->fail(TIERCE_LOCK_INTERNAL, e.what());
  } catch (...) {
    return c->fail(TIERCE_LOCK_INTERNAL, "unknown exception");
  }
}

}  // namespace

extern "C" {

tierce_lock_client* tierce_lock_connect(const char* socket_path, char* err, size_t errlen) {
  try {
    std::string path =
        socket_path && *socket_path ? std::string(socket_path) : LockClient::default_socket();
    auto* c = new tierce_lock_client(path);
    copy_err(err, errlen, "");
    return c;
  } catch (const std::exception& e) {
    copy_err(err, errlen, e.what());
  } catch (...) {
    copy_err(err, errlen, "unknown exception");
  }
  return nullptr;
}

void tierce_lock_close(tierce_lock_client* c) {
  delete c;
}

int tierce_lock_acquire(tierce_lock_client* c, const char* name, int mode, int timeout_ms,
                        uint64_t* hold, uint64_t* token) {
  if (!c) return TIERCE_LOCK_BADREQUEST;
  if (!name) return c->fail(TIERCE_LOCK_BADNAME, "the lock name is NULL");
  if (mode != TIERCE_LOCK_SHARED && mode != TIERCE_LOCK_EXCLUSIVE)
    return c->fail(TIERCE_LOCK_BADREQUEST,
                   "mode must be TIERCE_LOCK_SHARED (1) or TIERCE_LOCK_EXCLUSIVE (2)");
  return guarded(c, [&] {
    std::string n(name);
    tierce::dlm::HeldLock h;
    if (timeout_ms == 0) {
      auto t = c->client.try_lock(n, Mode(mode));
      if (!t)
        return c->fail(TIERCE_LOCK_WOULDBLOCK,
                       ("lock '" + n + "': the lock is held or has waiters").c_str());
      h = std::move(*t);
    } else {
      h = c->client.lock(n, Mode(mode),
                         std::chrono::milliseconds(timeout_ms < 0 ? -1 : timeout_ms));
    }
    if (token) *token = h.token();
    uint64_t id = h.release_ownership();  // the caller keeps the id
    if (hold) *hold = id;
    return int(TIERCE_LOCK_OK);
  });
}

int tierce_lock_release(tierce_lock_client* c, uint64_t hold) {
  if (!c) return TIERCE_LOCK_BADREQUEST;
  return guarded(c, [&] {
    c->client.unlock(hold);
    return int(TIERCE_LOCK_OK);
  });
}

int tierce_lock_next_revoked(tierce_lock_client* c, uint64_t* hold) {
  if (!c) return TIERCE_LOCK_BADREQUEST;
  return guarded(c, [&] {
    auto r = c->client.next_revoked();
    if (!r) return int(TIERCE_LOCK_WOULDBLOCK);
    if (hold) *hold = r->hold;
    c->fail(TIERCE_LOCK_LEASELOST,
            ("hold " + std::to_string(r->hold) + " revoked: " + r->why).c_str());
    return int(TIERCE_LOCK_OK);
  });
}

int tierce_lock_event_fd(const tierce_lock_client* c) {
  return c ? c->client.event_fd() : -1;
}

const char* tierce_lock_strerror(int status) {
  switch (status) {
    case TIERCE_LOCK_OK:
      return "ok";
    case TIERCE_LOCK_TIMEOUT:
      return "timeout: the lock was not granted in time";
    case TIERCE_LOCK_WOULDBLOCK:
      return "would block: the lock is held or has waiters";
    case TIERCE_LOCK_NOTHELD:
      return "not held: this client does not hold that lock (unlocked, or revoked)";
    case TIERCE_LOCK_HOMEDOWN:
      return "home down: the lock's home node is not reachable";
    case TIERCE_LOCK_BADNAME:
      return "bad name: empty, longer than 255 bytes, or containing NUL";
    case TIERCE_LOCK_LEASELOST:
      return "lease lost: the hold was revoked";
    case TIERCE_LOCK_TOOMANY:
      return "too many: a lockd limit was reached";
    case TIERCE_LOCK_SHUTTINGDOWN:
      return "shutting down: tierce-lockd is stopping";
    case TIERCE_LOCK_BADREQUEST:
      return "bad request: invalid argument or malformed request";
    case TIERCE_LOCK_INTERNAL:
      return "internal error (lockd unreachable, connection lost, or a bug): see the last error";
  }
  return "unknown status";
}

const char* tierce_lock_last_error(const tierce_lock_client* c) {
  if (!c) return "";
  std::lock_guard g(c->err_mu);
  auto it = c->errors.find(std::this_thread::get_id());
  return it == c->errors.end() ? "" : it->second.c_str();
}

}  // extern "C"
