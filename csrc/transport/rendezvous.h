// What a transport needs to set itself up: the group's key-value store. The
// backend implements it over the c10d store (already prefixed per process group),
// so no transport includes torch.
#pragma once

#include <string>

namespace ringcoll {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key is set; throws (the store's timeout) if it never is.
  virtual std::string get(const std::string& key) = 0;
};

}  // namespace ringcoll
