#include "setup.h"

#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace linkemu {
namespace {

std::string err(const std::string& what) { return what + ": " + std::strerror(errno); }

// Writes `text` to a /proc file; returns errno (0 on success).
int write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = n == static_cast<ssize_t>(text.size()) ? 0 : (n < 0 ? errno : EIO);
  ::close(fd);
  return e;
}

class Sock {
 public:
  Sock() : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    if (fd_ < 0) throw SetupError(err("socket(AF_INET) in the new namespace"));
  }
  ~Sock() { ::close(fd_); }
  Sock(const Sock&) = delete;
  Sock& operator=(const Sock&) = delete;
  void ioctl(unsigned long req, ifreq* ifr, const char* what) {
    if (::ioctl(fd_, req, ifr) < 0) throw SetupError(err(std::string(what) + " on " + ifr->ifr_name));
  }
  bool try_ioctl(unsigned long req, ifreq* ifr) { return ::ioctl(fd_, req, ifr) == 0; }

 private:
  int fd_;
};

ifreq named(const std::string& dev) {
  ifreq ifr;
  std::memset(&ifr, 0, sizeof ifr);
  std::strncpy(ifr.ifr_name, dev.c_str(), IFNAMSIZ - 1);
  return ifr;
}

void set_up(Sock& s, const std::string& dev) {
  ifreq ifr = named(dev);
  s.ioctl(SIOCGIFFLAGS, &ifr, "SIOCGIFFLAGS");
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  s.ioctl(SIOCSIFFLAGS, &ifr, "SIOCSIFFLAGS (bring up)");
}

void set_ipv4(Sock& s, const std::string& dev, int req, in_addr a, const char* what) {
  ifreq ifr = named(dev);
  sockaddr_in sin;
  std::memset(&sin, 0, sizeof sin);
  sin.sin_family = AF_INET;
  sin.sin_addr = a;
  std::memcpy(&ifr.ifr_addr, &sin, sizeof sin);
  s.ioctl(req, &ifr, what);
}

}  // namespace

void enter_new_user_namespace() {
  const uid_t uid = ::geteuid();
  const gid_t gid = ::getegid();
  if (::unshare(CLONE_NEWUSER) < 0) {
    throw SetupError(err("unshare(CLONE_NEWUSER) for rootless mode (are unprivileged user namespaces enabled? "
                         "see /proc/sys/user/max_user_namespaces and kernel.unprivileged_userns_clone)"));
  }
  int e = write_file("/proc/self/setgroups", "deny");
  if (e != 0 && e != ENOENT) throw SetupError(std::string("writing /proc/self/setgroups: ") + std::strerror(e));
  if ((e = write_file("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1\n")) != 0)
    throw SetupError(std::string("writing /proc/self/uid_map: ") + std::strerror(e));
  if ((e = write_file("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1\n")) != 0)
    throw SetupError(std::string("writing /proc/self/gid_map: ") + std::strerror(e));
}

Side make_side(const std::string& dev, in_addr addr, int prefix, int mtu) {
  Side side;
  if (::unshare(CLONE_NEWNET) < 0) {
    throw SetupError(err("unshare(CLONE_NEWNET) (needs root, or rootless mode with user namespaces: --userns)"));
  }
  side.netns_fd = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  if (side.netns_fd < 0) throw SetupError(err("open /proc/self/ns/net"));
  struct stat st;
  if (::fstat(side.netns_fd, &st) == 0) side.netns_ino = st.st_ino;

  Sock s;
  set_up(s, "lo");

  // The TUN device is created in the namespace current at open(), so open it here.
  side.tun_fd = ::open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (side.tun_fd < 0) {
    throw SetupError(err("open /dev/net/tun (rootless needs it readable and writable by this user: "
                         "mode 0666, as Debian's udev sets it)"));
  }
  ifreq ifr = named(dev);
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  if (::ioctl(side.tun_fd, TUNSETIFF, &ifr) < 0) throw SetupError(err("TUNSETIFF " + dev));

  // IPv6 off on the TUN: no router solicitations or MLD reports on the emulated link, so each direction
  // carries exactly the traffic the experiment sends. Best effort (a kernel without IPv6 has no such file).
  write_file("/proc/sys/net/ipv6/conf/" + dev + "/disable_ipv6", "1");

  ifreq q = named(dev);
  q.ifr_mtu = mtu;
  s.ioctl(SIOCSIFMTU, &q, "SIOCSIFMTU");
  // A longer queue between the kernel and us than TUN's default 500 packets, for bursts. Best effort: in
  // a user namespace the kernel refuses it (EPERM) and the default stays.
  q = named(dev);
  q.ifr_qlen = 1000;
  s.try_ioctl(SIOCSIFTXQLEN, &q);
  set_ipv4(s, dev, SIOCSIFADDR, addr, "SIOCSIFADDR");
  in_addr mask;
  mask.s_addr = htonl(prefix == 0 ? 0 : 0xFFFFFFFFu << (32 - prefix));
  set_ipv4(s, dev, SIOCSIFNETMASK, mask, "SIOCSIFNETMASK");
  set_up(s, dev);
  return side;
}

}  // namespace linkemu
