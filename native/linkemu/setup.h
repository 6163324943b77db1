// Namespace and TUN set-up for the link emulator. Every function throws SetupError with a sentence a
// person can act on.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace linkemu {

struct SetupError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Moves this (single-threaded) process into a new user namespace where it is root, mapped to the caller's
// uid/gid outside. For the rootless mode: afterwards it may create network namespaces and TUN devices.
void enter_new_user_namespace();

struct Side {
  int tun_fd = -1;    // the TUN device's queue, non-blocking, close-on-exec
  int netns_fd = -1;  // an open handle on the side's network namespace (keeps it alive; nsenter can use /proc/PID/fd/N)
  uint64_t netns_ino = 0;
};

// Creates a new network namespace (this process moves into it), brings `lo` up, creates TUN device `dev`
// with address `addr`/`prefix`, MTU `mtu`, IPv6 off on it, and brings it up.
Side make_side(const std::string& dev, in_addr addr, int prefix, int mtu);

}  // namespace linkemu
