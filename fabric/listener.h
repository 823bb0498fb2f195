// fabric/listener.h — one accepting endpoint of a Server (internal).
#pragma once

#include <string>

namespace tierce::fabric {

class Listener {
 public:
  virtual ~Listener() = default;
  virtual std::string uri() const = 0;  // with the bound port filled in
  // Stops accepting, shuts down open connections and waits for their handlers. Idempotent.
  virtual void stop() = 0;
};

}  // namespace tierce::fabric
