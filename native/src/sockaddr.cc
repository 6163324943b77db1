#include "sockaddr.h"

#include <arpa/inet.h>
#include <net/if.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace catp {

uint16_t SockAddr::port() const {
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

void SockAddr::setPort(uint16_t port) {
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(port);
  if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(port);
}

bool SockAddr::isAny() const {
  if (ss.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(&ss)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (ss.ss_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(&ss)->sin6_addr);
  }
  return false;
}

bool SockAddr::sameAs(const sockaddr_storage& other, socklen_t otherLen) const {
  return len == otherLen && std::memcmp(&ss, &other, len) == 0;
}

bool ParseAddress(const std::string& host, uint16_t port, SockAddr* out) {
  *out = SockAddr();
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out->ss);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(port);
    out->len = sizeof(sockaddr_in);
    return true;
  }
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out->ss);
  std::string addr = host;
  uint32_t scope = 0;
  size_t pct = host.find('%');
  if (pct != std::string::npos) {
    addr = host.substr(0, pct);
    std::string zone = host.substr(pct + 1);
    scope = if_nametoindex(zone.c_str());
    if (scope == 0) {
      char* end = nullptr;
      unsigned long n = std::strtoul(zone.c_str(), &end, 10);
      if (zone.empty() || *end != '\0' || n > UINT32_MAX) return false;
      scope = static_cast<uint32_t>(n);
    }
  }
  if (inet_pton(AF_INET6, addr.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(port);
    v6->sin6_scope_id = scope;
    out->len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

SockAddr MapToV6(const SockAddr& in) {
  if (in.family() != AF_INET) return in;
  const auto* v4 = reinterpret_cast<const sockaddr_in*>(&in.ss);
  SockAddr out;
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out.ss);
  v6->sin6_family = AF_INET6;
  v6->sin6_port = v4->sin_port;
  v6->sin6_addr.s6_addr[10] = 0xff;
  v6->sin6_addr.s6_addr[11] = 0xff;
  std::memcpy(&v6->sin6_addr.s6_addr[12], &v4->sin_addr, 4);
  out.len = sizeof(sockaddr_in6);
  return out;
}

PeerInfo DescribePeer(const sockaddr_storage& ss, socklen_t len) {
  PeerInfo info;
  char buf[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
  if (ss.ss_family == AF_INET && len >= sizeof(sockaddr_in)) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &v4->sin_addr, buf, sizeof buf);
    info.address = buf;
    info.port = ntohs(v4->sin_port);
    info.family = 4;
  } else if (ss.ss_family == AF_INET6 && len >= sizeof(sockaddr_in6)) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&ss);
    info.port = ntohs(v6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&v6->sin6_addr)) {
      inet_ntop(AF_INET, &v6->sin6_addr.s6_addr[12], buf, sizeof buf);
      info.family = 4;
    } else {
      inet_ntop(AF_INET6, &v6->sin6_addr, buf, sizeof buf);
      info.family = 6;
      if (v6->sin6_scope_id != 0 && IN6_IS_ADDR_LINKLOCAL(&v6->sin6_addr)) {
        size_t n = std::strlen(buf);
        buf[n] = '%';
        if (if_indextoname(v6->sin6_scope_id, buf + n + 1) == nullptr) {
          std::snprintf(buf + n + 1, sizeof buf - n - 1, "%u", v6->sin6_scope_id);
        }
      }
    }
    info.address = buf;
  }
  return info;
}

}  // namespace catp
