// Socket address helpers: IP literals in, peer descriptions out (v4-mapped IPv6 reported as IPv4).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>

namespace catp {

struct SockAddr {
  sockaddr_storage ss{};
  socklen_t len = 0;

  int family() const { return ss.ss_family; }
  uint16_t port() const;
  void setPort(uint16_t port);
  bool isAny() const;  // 0.0.0.0 or ::
  bool sameAs(const sockaddr_storage& other, socklen_t otherLen) const;
};

// Parses an IPv4 or IPv6 literal (no host names, no brackets). IPv6 may carry a %scope.
bool ParseAddress(const std::string& host, uint16_t port, SockAddr* out);

// 1.2.3.4 -> ::ffff:1.2.3.4 (for sending from a dual-stack IPv6 socket). Other families unchanged.
SockAddr MapToV6(const SockAddr& in);

struct PeerInfo {
  std::string address;
  uint16_t port = 0;
  int family = 4;  // 4 or 6
};

PeerInfo DescribePeer(const sockaddr_storage& ss, socklen_t len);

}  // namespace catp
