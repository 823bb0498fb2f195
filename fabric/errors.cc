// fabric/errors.cc — names for statuses, errno wrapping.
#include "fabric/errors.h"

#include <cerrno>
#include <cstring>

namespace tierce::fabric {

std::string_view to_string(Errc e) {
  switch (e) {
    case Errc::Ok:
      return "ok";
    case Errc::BadKey:
      return "bad key";
    case Errc::OutOfBounds:
      return "out of bounds";
    case Errc::Misaligned:
      return "misaligned";
    case Errc::NoSuchRegion:
      return "no such region";
    case Errc::Revoked:
      return "region revoked";
    case Errc::TooLarge:
      return "too large";
    case Errc::BadRequest:
      return "bad request";
    case Errc::NoSuchService:
      return "no such service";
    case Errc::HandlerFailed:
      return "handler failed";
    case Errc::NotPermitted:
      return "not permitted";
    case Errc::Busy:
      return "server busy (connection limit)";
    case Errc::Timeout:
      return "timeout";
    case Errc::PeerClosed:
      return "peer closed";
    case Errc::PeerDead:
      return "peer dead (lease expired)";
    case Errc::AuthFailed:
      return "authentication failed";
    case Errc::Fenced:
      return "fenced (the owner no longer vouches for the region)";
    case Errc::Protocol:
      return "protocol error";
    case Errc::NoDevice:
      return "no RDMA device";
    case Errc::Unsupported:
      return "unsupported";
    case Errc::Config:
      return "configuration error";
    case Errc::System:
      return "system error";
  }
  return "unknown";
}

void throw_errno(const std::string& what) {
  int e = errno;
  throw FabricError(Errc::System, what + ": " + std::strerror(e));
}

}  // namespace tierce::fabric
