// catp-linkemu: a user-space link emulator between two network namespaces (see usage() below and
// lab/README.md). It creates both namespaces itself (and, rootless, a user namespace around them), so
// they live exactly as long as this process and whatever the caller starts inside them.
//
// Clock: every time here is CLOCK_MONOTONIC in nanoseconds, the clock Node's process.hrtime.bigint()
// reads, common to all namespaces of the host. The ready line and the log header give
// realtime_minus_monotonic_ns, so CLOCK_REALTIME stamps (SO_TIMESTAMPNS) map by subtracting it.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model.h"
#include "setup.h"

namespace linkemu {
namespace {

const char kUsage[] =
    "usage: catp-linkemu [options]\n"
    "\n"
    "Creates two network namespaces, 'client' and 'server', each with a TUN device, and moves IPv4 packets\n"
    "between them, impairing each direction (c2s: client to server, s2c: server to client). Prints one JSON\n"
    "line {\"event\":\"ready\",...} when set up, {\"event\":\"counters\",...} on SIGUSR1 (after flushing the\n"
    "log), and {\"event\":\"exit\",...} when stopped by SIGTERM/SIGINT or its parent's death.\n"
    "\n"
    "link options (apply to both directions; prefix with c2s- or s2c- for one, e.g. --s2c-rate 10000):\n"
    "  --delay MS             propagation delay, milliseconds (fractions allowed; default 0)\n"
    "  --rate BYTES_PER_S     bottleneck rate in IP bytes per second (0 = unlimited, the default)\n"
    "  --queue BYTES          bound of the bottleneck's queue, packet on the wire included (tail drop;\n"
    "                         default the larger of 15000 and 200 ms at the rate)\n"
    "  --queue-packets N      also bound the queue to N packets (default: no packet bound)\n"
    "  --loss P               Bernoulli loss probability in [0,1]\n"
    "  --burst PGB,PBG[,LB[,LG]]  Gilbert-Elliott loss: P(good->bad), P(bad->good), loss in bad (default 1)\n"
    "                         and in good state (default 0); not together with --loss\n"
    "  --reorder P,MS         hold a packet back by an extra MS with probability P\n"
    "other options:\n"
    "  --seed N               seed of the loss and reorder streams (default 1)\n"
    "  --log FILE | --log-fd N  per-packet log (text, one event a line; see lab/README.md)\n"
    "  --userns               create a user namespace first (rootless mode)\n"
    "  --client-addr A --server-addr B --prefix N   addresses (default 10.77.0.1, 10.77.0.2, /24)\n"
    "  --mtu N                MTU of both TUN devices (default 1500)\n"
    "  --dry-run-loss N [--dry-run-dir c2s|s2c]  print the loss pattern of the first N packets and exit\n";

int64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

int64_t realtime_minus_monotonic_ns() {
  timespec a, r, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  clock_gettime(CLOCK_REALTIME, &r);
  clock_gettime(CLOCK_MONOTONIC, &b);
  const int64_t ma = static_cast<int64_t>(a.tv_sec) * 1000000000 + a.tv_nsec;
  const int64_t mb = static_cast<int64_t>(b.tv_sec) * 1000000000 + b.tv_nsec;
  const int64_t rt = static_cast<int64_t>(r.tv_sec) * 1000000000 + r.tv_nsec;
  return rt - (ma + (mb - ma) / 2);
}

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct DirConfig {
  int64_t delay_ns = 0;
  uint64_t rate = 0;
  uint64_t queue_bytes = 0;
  bool queue_set = false;
  uint64_t queue_packets = 0;
  LossParams loss;
  bool loss_set = false, burst_set = false;
  double reorder_p = 0;
  int64_t reorder_ns = 0;
};

struct Config {
  DirConfig dir[2];  // 0 = c2s, 1 = s2c
  uint64_t seed = 1;
  std::string log_path;
  int log_fd = -1;
  bool userns = false;
  std::string client_addr = "10.77.0.1", server_addr = "10.77.0.2";
  int prefix = 24;
  int mtu = 1500;
  long dry_run = -1;
  int dry_run_dir = 0;
};

double parse_double(const std::string& name, const std::string& v, double lo, double hi) {
  char* end = nullptr;
  errno = 0;
  const double d = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || errno != 0 || !std::isfinite(d) || d < lo || d > hi) {
    char range[64];
    std::snprintf(range, sizeof range, "%g to %g", lo, hi);
    throw UsageError("--" + name + " must be a number from " + range + ", got '" + v + "'");
  }
  return d;
}

uint64_t parse_uint(const std::string& name, const std::string& v, uint64_t lo, uint64_t hi) {
  char* end = nullptr;
  errno = 0;
  if (v.empty() || v[0] == '-' || v[0] == '+') throw UsageError("--" + name + " must be a whole number, got '" + v + "'");
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (*end != '\0' || errno != 0 || n < lo || n > hi) {
    throw UsageError("--" + name + " must be a whole number from " + std::to_string(lo) + " to " + std::to_string(hi) +
                     ", got '" + v + "'");
  }
  return n;
}

std::vector<std::string> split_commas(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    size_t c = v.find(',', start);
    out.push_back(v.substr(start, c == std::string::npos ? std::string::npos : c - start));
    if (c == std::string::npos) return out;
    start = c + 1;
  }
}

void apply_dir_option(DirConfig& d, const std::string& key, const std::string& name, const std::string& v) {
  if (key == "delay") {
    d.delay_ns = std::llround(parse_double(name, v, 0, 60000) * 1e6);
  } else if (key == "rate") {
    d.rate = parse_uint(name, v, 0, 100000000000ull);
  } else if (key == "queue") {
    d.queue_bytes = parse_uint(name, v, 1, 1ull << 32);
    d.queue_set = true;
  } else if (key == "queue-packets") {
    d.queue_packets = parse_uint(name, v, 1, 1000000);
  } else if (key == "loss") {
    d.loss.kind = LossParams::kBernoulli;
    d.loss.p = parse_double(name, v, 0, 1);
    d.loss_set = true;
  } else if (key == "burst") {
    auto parts = split_commas(v);
    if (parts.size() < 2 || parts.size() > 4) throw UsageError("--" + name + " takes PGB,PBG[,LOSS_BAD[,LOSS_GOOD]], got '" + v + "'");
    d.loss.kind = LossParams::kGilbertElliott;
    d.loss.p_gb = parse_double(name + " PGB", parts[0], 0, 1);
    d.loss.p_bg = parse_double(name + " PBG", parts[1], 0, 1);
    d.loss.loss_bad = parts.size() > 2 ? parse_double(name + " LOSS_BAD", parts[2], 0, 1) : 1.0;
    d.loss.loss_good = parts.size() > 3 ? parse_double(name + " LOSS_GOOD", parts[3], 0, 1) : 0.0;
    d.burst_set = true;
  } else if (key == "reorder") {
    auto parts = split_commas(v);
    if (parts.size() != 2) throw UsageError("--" + name + " takes P,MS, got '" + v + "'");
    d.reorder_p = parse_double(name + " P", parts[0], 0, 1);
    d.reorder_ns = std::llround(parse_double(name + " MS", parts[1], 0, 60000) * 1e6);
  } else {
    throw UsageError("unknown option --" + name);
  }
}

Config parse_args(int argc, char** argv) {
  Config c;
  static const char* dir_keys[] = {"delay", "rate", "queue", "queue-packets", "loss", "burst", "reorder"};
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool has_value = false;
    size_t eq = name.find('=');
    if (eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (name == "help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (name == "userns") {
      if (has_value) throw UsageError("--userns takes no value");
      c.userns = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) throw UsageError("--" + name + " needs a value");
      value = argv[++i];
    }
    int scope = -1;  // -1 both, 0 c2s, 1 s2c
    std::string key = name;
    if (key.rfind("c2s-", 0) == 0) scope = 0, key = key.substr(4);
    else if (key.rfind("s2c-", 0) == 0) scope = 1, key = key.substr(4);
    bool is_dir_key = false;
    for (const char* k : dir_keys) is_dir_key = is_dir_key || key == k;
    if (is_dir_key) {
      for (int d = 0; d < 2; d++)
        if (scope < 0 || scope == d) apply_dir_option(c.dir[d], key, name, value);
      continue;
    }
    if (scope >= 0) throw UsageError("unknown option --" + name);
    if (name == "seed") c.seed = parse_uint(name, value, 0, UINT64_MAX);
    else if (name == "log") c.log_path = value;
    else if (name == "log-fd") c.log_fd = static_cast<int>(parse_uint(name, value, 0, 1 << 20));
    else if (name == "client-addr") c.client_addr = value;
    else if (name == "server-addr") c.server_addr = value;
    else if (name == "prefix") c.prefix = static_cast<int>(parse_uint(name, value, 8, 30));
    else if (name == "mtu") c.mtu = static_cast<int>(parse_uint(name, value, 576, 9000));
    else if (name == "dry-run-loss") c.dry_run = static_cast<long>(parse_uint(name, value, 0, 100000000));
    else if (name == "dry-run-dir") {
      if (value == "c2s") c.dry_run_dir = 0;
      else if (value == "s2c") c.dry_run_dir = 1;
      else throw UsageError("--dry-run-dir must be c2s or s2c, got '" + value + "'");
    } else throw UsageError("unknown option --" + name);
  }
  for (int d = 0; d < 2; d++) {
    DirConfig& dc = c.dir[d];
    const char* dn = d == 0 ? "c2s" : "s2c";
    if (dc.loss_set && dc.burst_set) throw UsageError(std::string("--loss and --burst both set for ") + dn + ": choose one");
    if (dc.rate > 0) {
      if (!dc.queue_set) dc.queue_bytes = std::max<uint64_t>(15000, dc.rate / 5);
      if (dc.queue_bytes < static_cast<uint64_t>(c.mtu))
        throw UsageError(std::string("--queue for ") + dn + " must hold at least one MTU-sized packet (" +
                         std::to_string(c.mtu) + " bytes), got " + std::to_string(dc.queue_bytes));
    } else if (dc.queue_set || dc.queue_packets) {
      throw UsageError(std::string("--queue/--queue-packets for ") + dn + " need a --rate (no rate, no queue)");
    }
  }
  if (!c.log_path.empty() && c.log_fd >= 0) throw UsageError("--log and --log-fd: choose one");
  return c;
}

// ---- packets -------------------------------------------------------------------------------------------

struct Meta {
  bool ipv4 = false;
  uint8_t proto = 0;
  uint16_t ipid = 0, sport = 0, dport = 0;
  char src[INET_ADDRSTRLEN] = "-", dst[INET_ADDRSTRLEN] = "-";
};

Meta parse_meta(const uint8_t* p, size_t n) {
  Meta m;
  if (n < 20 || (p[0] >> 4) != 4) return m;
  const size_t ihl = (p[0] & 0x0F) * 4u;
  if (ihl < 20 || ihl > n) return m;
  m.ipv4 = true;
  m.ipid = static_cast<uint16_t>(p[4] << 8 | p[5]);
  m.proto = p[9];
  inet_ntop(AF_INET, p + 12, m.src, sizeof m.src);
  inet_ntop(AF_INET, p + 16, m.dst, sizeof m.dst);
  const bool first_fragment = ((p[6] & 0x1F) << 8 | p[7]) == 0;
  if (first_fragment && (m.proto == 6 || m.proto == 17) && n >= ihl + 4) {
    m.sport = static_cast<uint16_t>(p[ihl] << 8 | p[ihl + 1]);
    m.dport = static_cast<uint16_t>(p[ihl + 2] << 8 | p[ihl + 3]);
  }
  return m;
}

struct Counters {
  uint64_t packets_in = 0, bytes_in = 0, delivered = 0, bytes_out = 0;
  uint64_t dropped_loss = 0, dropped_queue = 0, dropped_nonip = 0, dropped_write = 0, dropped_overflow = 0;
  uint64_t reordered = 0;
  int64_t max_late_ns = 0;
  uint64_t sum_late_ns = 0;
};

struct Pending {
  int64_t due;
  uint64_t order;
  int dir;
  uint64_t idx;
  bool held;
  Meta meta;
  std::vector<uint8_t> data;
};

struct Later {
  bool operator()(const std::unique_ptr<Pending>& a, const std::unique_ptr<Pending>& b) const {
    return a->due != b->due ? a->due > b->due : a->order > b->order;
  }
};

constexpr size_t kMaxPending = 100000;  // packets held in all delay lines together

struct Direction {
  const char* name;
  int in_fd, out_fd;
  DirConfig cfg;
  LossGen loss;
  ReorderGen reorder;
  Shaper shaper;
  uint64_t next_idx = 0;
  Counters c;
  Direction(const char* n, const DirConfig& d, uint64_t seed, uint64_t loss_stream, uint64_t reorder_stream)
      : name(n), in_fd(-1), out_fd(-1), cfg(d), loss(d.loss, seed, loss_stream), reorder(d.reorder_p, seed, reorder_stream),
        shaper(d.rate, d.queue_bytes, d.queue_packets) {}
};

class Emulator {
 public:
  Emulator(const Config& cfg, FILE* log)
      : log_(log),
        dirs_{Direction("c2s", cfg.dir[0], cfg.seed, kC2sLoss, kC2sReorder),
              Direction("s2c", cfg.dir[1], cfg.seed, kS2cLoss, kS2cReorder)} {}

  Direction& dir(int d) { return dirs_[d]; }

  void arrive(int d, const uint8_t* buf, size_t n, int64_t now) {
    Direction& D = dirs_[d];
    Meta m = parse_meta(buf, n);
    if (!m.ipv4) {
      D.c.dropped_nonip++;
      logline(now, D, 'X', -1, n, m, "nonip");
      return;
    }
    const uint64_t k = D.next_idx++;
    D.c.packets_in++;
    D.c.bytes_in += n;
    logline(now, D, 'A', static_cast<int64_t>(k), n, m, "-");
    const bool lost = D.loss.next();      // both draws always, so index k's fate depends on k alone
    const bool held = D.reorder.next();
    if (lost) {
      D.c.dropped_loss++;
      logline(now, D, 'X', static_cast<int64_t>(k), n, m, "loss");
      return;
    }
    if (heap_.size() >= kMaxPending) {
      D.c.dropped_overflow++;
      logline(now, D, 'X', static_cast<int64_t>(k), n, m, "overflow");
      return;
    }
    int64_t finish;
    if (!D.shaper.admit(now, static_cast<uint32_t>(n), &finish)) {
      D.c.dropped_queue++;
      logline(now, D, 'X', static_cast<int64_t>(k), n, m, "queue");
      return;
    }
    auto p = std::make_unique<Pending>();
    p->due = finish + D.cfg.delay_ns + (held ? D.cfg.reorder_ns : 0);
    p->order = order_++;
    p->dir = d;
    p->idx = k;
    p->held = held;
    p->meta = m;
    p->data.assign(buf, buf + n);
    if (held) D.c.reordered++;
    heap_.push_back(std::move(p));
    std::push_heap(heap_.begin(), heap_.end(), Later());
  }

  // Delivers everything due by now; returns the next due time or -1.
  int64_t deliver_due() {
    for (;;) {
      if (heap_.empty()) return -1;
      const int64_t now = mono_ns();
      if (heap_.front()->due > now) return heap_.front()->due;
      std::pop_heap(heap_.begin(), heap_.end(), Later());
      std::unique_ptr<Pending> p = std::move(heap_.back());
      heap_.pop_back();
      Direction& D = dirs_[p->dir];
      ssize_t w;
      do {
        w = ::write(D.out_fd, p->data.data(), p->data.size());
      } while (w < 0 && errno == EINTR);
      const int64_t late = now - p->due;
      if (w < 0) {
        D.c.dropped_write++;
        logline(now, D, 'X', static_cast<int64_t>(p->idx), p->data.size(), p->meta, "write");
        continue;
      }
      D.c.delivered++;
      D.c.bytes_out += p->data.size();
      D.c.sum_late_ns += static_cast<uint64_t>(late);
      D.c.max_late_ns = std::max(D.c.max_late_ns, late);
      char extra[40];
      std::snprintf(extra, sizeof extra, "%" PRId64 "%s", late, p->held ? " r" : "");
      logline(now, D, 'D', static_cast<int64_t>(p->idx), p->data.size(), p->meta, extra);
    }
  }

  size_t pending() const { return heap_.size(); }
  size_t pending_in(int d) const {
    size_t n = 0;
    for (const auto& p : heap_) n += p->dir == d;
    return n;
  }

  std::string counters_json(const char* event) const {
    std::string s = std::string("{\"event\":\"") + event + "\"";
    for (int d = 0; d < 2; d++) {
      const Direction& D = dirs_[d];
      const Counters& c = D.c;
      char buf[700];
      std::snprintf(buf, sizeof buf,
                    ",\"%s\":{\"packetsIn\":%" PRIu64 ",\"bytesIn\":%" PRIu64 ",\"delivered\":%" PRIu64
                    ",\"bytesOut\":%" PRIu64 ",\"droppedLoss\":%" PRIu64 ",\"droppedQueue\":%" PRIu64
                    ",\"droppedNonIp\":%" PRIu64 ",\"droppedWrite\":%" PRIu64 ",\"droppedOverflow\":%" PRIu64
                    ",\"reordered\":%" PRIu64 ",\"pending\":%zu,\"maxBacklogBytes\":%" PRIu64
                    ",\"meanLateNs\":%" PRIu64 ",\"maxLateNs\":%" PRId64 "}",
                    D.name, c.packets_in, c.bytes_in, c.delivered, c.bytes_out, c.dropped_loss, c.dropped_queue,
                    c.dropped_nonip, c.dropped_write, c.dropped_overflow, c.reordered, pending_in(d),
                    D.shaper.max_backlog_bytes(), c.delivered ? c.sum_late_ns / c.delivered : 0, c.max_late_ns);
      s += buf;
    }
    return s + "}";
  }

 private:
  void logline(int64_t t, const Direction& D, char ev, int64_t idx, size_t len, const Meta& m, const char* extra) {
    if (!log_) return;
    std::fprintf(log_, "%" PRId64 " %s %c %" PRId64 " %zu %u %s %u %s %u %u %s\n", t, D.name, ev, idx, len,
                 m.proto, m.src, m.sport, m.dst, m.dport, m.ipid, extra);
  }

  FILE* log_;
  Direction dirs_[2];
  std::vector<std::unique_ptr<Pending>> heap_;
  uint64_t order_ = 0;
};

std::string dir_json(const DirConfig& d) {
  char buf[400];
  const char* kind = d.loss.kind == LossParams::kBernoulli ? "bernoulli"
                     : d.loss.kind == LossParams::kGilbertElliott ? "gilbert-elliott" : "none";
  std::snprintf(buf, sizeof buf,
                "{\"delayNs\":%" PRId64 ",\"rate\":%" PRIu64 ",\"queueBytes\":%" PRIu64 ",\"queuePackets\":%" PRIu64
                ",\"loss\":\"%s\",\"p\":%.17g,\"pGoodToBad\":%.17g,\"pBadToGood\":%.17g,\"lossBad\":%.17g,"
                "\"lossGood\":%.17g,\"reorderP\":%.17g,\"reorderNs\":%" PRId64 "}",
                d.delay_ns, d.rate, d.queue_bytes, d.queue_packets, kind, d.loss.p, d.loss.p_gb, d.loss.p_bg,
                d.loss.loss_bad, d.loss.loss_good, d.reorder_p, d.reorder_ns);
  return buf;
}

int dry_run(const Config& cfg) {
  const int d = cfg.dry_run_dir;
  LossGen g(cfg.dir[d].loss, cfg.seed, d == 0 ? kC2sLoss : kS2cLoss);
  std::printf("{\"dir\":\"%s\",\"seed\":%" PRIu64 ",\"n\":%ld,\"dropped\":[", d == 0 ? "c2s" : "s2c", cfg.seed, cfg.dry_run);
  bool first = true;
  for (long k = 0; k < cfg.dry_run; k++) {
    if (g.next()) {
      std::printf("%s%ld", first ? "" : ",", k);
      first = false;
    }
  }
  std::printf("]}\n");
  return 0;
}

void arm(int tfd, int64_t due) {
  itimerspec its;
  std::memset(&its, 0, sizeof its);
  if (due >= 0) {
    its.it_value.tv_sec = due / 1000000000;
    its.it_value.tv_nsec = due % 1000000000;
    if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  }
  timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, nullptr);
}

// Kills (SIGKILL) every process, other than this one, whose network namespace is one of ours: whatever
// the caller started inside and left running, descendants included. Run on the way out, so the
// namespaces die with this process even when the orchestrator was killed before it could clean up.
// Returns how many processes it signalled.
int sweep_namespaces(uint64_t ino_a, uint64_t ino_b) {
  int killed = 0;
  for (int round = 0; round < 5; round++) {
    DIR* d = opendir("/proc");
    if (!d) return killed;
    int found = 0;
    while (dirent* e = readdir(d)) {
      char* end;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (*end != '\0' || pid <= 0 || pid == static_cast<long>(getpid())) continue;
      struct stat st;
      const std::string path = std::string("/proc/") + e->d_name + "/ns/net";
      if (::stat(path.c_str(), &st) != 0) continue;  // gone, or not ours to see
      if (st.st_ino != ino_a && st.st_ino != ino_b) continue;
      if (::kill(static_cast<pid_t>(pid), SIGKILL) == 0) found++;
    }
    closedir(d);
    killed += found;
    if (found == 0) break;
    usleep(20000);  // let the kills land before looking again (children forked meanwhile)
  }
  return killed;
}

void emit(const std::string& line) {
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  Config cfg;
  try {
    cfg = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "catp-linkemu: %s\nRun 'catp-linkemu --help' for usage.\n", e.what());
    return 2;
  }
  if (cfg.dry_run >= 0) return dry_run(cfg);

  in_addr client_a, server_a;
  if (inet_pton(AF_INET, cfg.client_addr.c_str(), &client_a) != 1 ||
      inet_pton(AF_INET, cfg.server_addr.c_str(), &server_a) != 1) {
    std::fprintf(stderr, "catp-linkemu: --client-addr and --server-addr must be IPv4 addresses\n");
    return 2;
  }
  const uint32_t mask = 0xFFFFFFFFu << (32 - cfg.prefix);
  if (client_a.s_addr == server_a.s_addr ||
      (ntohl(client_a.s_addr) & mask) != (ntohl(server_a.s_addr) & mask)) {
    std::fprintf(stderr, "catp-linkemu: client and server addresses must differ and share the /%d prefix\n", cfg.prefix);
    return 2;
  }

  FILE* log = nullptr;
  if (cfg.log_fd >= 0) {
    log = fdopen(cfg.log_fd, "w");
    if (!log) {
      std::fprintf(stderr, "catp-linkemu: --log-fd %d: %s\n", cfg.log_fd, std::strerror(errno));
      return 2;
    }
  } else if (!cfg.log_path.empty()) {
    log = std::fopen(cfg.log_path.c_str(), "w");
    if (!log) {
      std::fprintf(stderr, "catp-linkemu: --log %s: %s\n", cfg.log_path.c_str(), std::strerror(errno));
      return 2;
    }
  }
  if (log) setvbuf(log, nullptr, _IOFBF, 1 << 20);

  // Signals arrive through a signalfd; block them first so none is lost during set-up.
  sigset_t sigs;
  sigemptyset(&sigs);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&sigs, s);
  sigprocmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const pid_t parent = getppid();

  Side client, server;
  try {
    if (cfg.userns) enter_new_user_namespace();
    client = make_side("catp0", client_a, cfg.prefix, cfg.mtu);
    server = make_side("catp0", server_a, cfg.prefix, cfg.mtu);
  } catch (const SetupError& e) {
    std::fprintf(stderr, "catp-linkemu: set-up failed: %s\n", e.what());
    return 1;
  }
  // Die with the parent (the orchestrator): set after the credential change of unshare(CLONE_NEWUSER).
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  prctl(PR_SET_DUMPABLE, 1);  // nsenter reaches the namespaces through /proc/PID/fd, which needs this
  prctl(PR_SET_TIMERSLACK, 1UL);  // timer wake-ups exact to the nanosecond the kernel can do, not 50 us late
  if (getppid() != parent) return 1;  // the parent died during set-up

  const int sfd = signalfd(-1, &sigs, SFD_NONBLOCK | SFD_CLOEXEC);
  const int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  const int ep = epoll_create1(EPOLL_CLOEXEC);
  if (sfd < 0 || tfd < 0 || ep < 0) {
    std::fprintf(stderr, "catp-linkemu: signalfd/timerfd/epoll: %s\n", std::strerror(errno));
    return 1;
  }
  Emulator emu(cfg, log);
  emu.dir(0).in_fd = client.tun_fd;
  emu.dir(0).out_fd = server.tun_fd;
  emu.dir(1).in_fd = server.tun_fd;
  emu.dir(1).out_fd = client.tun_fd;
  for (int fd : {client.tun_fd, server.tun_fd, tfd, sfd}) {
    epoll_event ev;
    std::memset(&ev, 0, sizeof ev);
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
      std::fprintf(stderr, "catp-linkemu: epoll_ctl: %s\n", std::strerror(errno));
      return 1;
    }
  }

  const int64_t offset = realtime_minus_monotonic_ns();
  if (log) {
    std::fprintf(log, "# catp-linkemu log v1\n# clock CLOCK_MONOTONIC ns; realtime_minus_monotonic_ns %" PRId64 "\n",
                 offset);
    std::fprintf(log, "# seed %" PRIu64 "\n# c2s %s\n# s2c %s\n", cfg.seed, dir_json(cfg.dir[0]).c_str(),
                 dir_json(cfg.dir[1]).c_str());
    std::fprintf(log, "# fields: t_ns dir ev(A arrive|D depart|X drop) idx len proto src sport dst dport ipid "
                      "extra(D: late_ns [r = held back]; X: reason)\n");
    std::fflush(log);
  }
  char ready[1600];
  std::snprintf(ready, sizeof ready,
                "{\"event\":\"ready\",\"pid\":%d,\"userns\":%s,\"clock\":\"CLOCK_MONOTONIC\","
                "\"realtimeMinusMonotonicNs\":%" PRId64 ",\"mtu\":%d,\"seed\":\"%" PRIu64 "\","
                "\"client\":{\"dev\":\"catp0\",\"address\":\"%s\",\"netnsFd\":%d,\"netnsIno\":%" PRIu64 "},"
                "\"server\":{\"dev\":\"catp0\",\"address\":\"%s\",\"netnsFd\":%d,\"netnsIno\":%" PRIu64 "},"
                "\"c2s\":%s,\"s2c\":%s}",
                static_cast<int>(getpid()), cfg.userns ? "true" : "false", offset, cfg.mtu, cfg.seed,
                cfg.client_addr.c_str(), client.netns_fd, client.netns_ino, cfg.server_addr.c_str(), server.netns_fd,
                server.netns_ino, dir_json(cfg.dir[0]).c_str(), dir_json(cfg.dir[1]).c_str());
  emit(ready);

  std::vector<uint8_t> buf(65536);
  int64_t last_flush = mono_ns();
  bool running = true;
  while (running) {
    epoll_event evs[8];
    const int n = epoll_wait(ep, evs, 8, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "catp-linkemu: epoll_wait: %s\n", std::strerror(errno));
      break;
    }
    for (int i = 0; i < n; i++) {
      const int fd = evs[i].data.fd;
      if (fd == client.tun_fd || fd == server.tun_fd) {
        const int d = fd == client.tun_fd ? 0 : 1;
        for (int j = 0; j < 256; j++) {  // bounded, so one busy direction cannot starve the timer
          const ssize_t r = ::read(fd, buf.data(), buf.size());
          if (r < 0) {
            if (errno == EINTR) continue;
            break;  // EAGAIN: drained
          }
          emu.arrive(d, buf.data(), static_cast<size_t>(r), mono_ns());
        }
      } else if (fd == tfd) {
        uint64_t expirations;
        while (::read(tfd, &expirations, sizeof expirations) > 0) {
        }
      } else if (fd == sfd) {
        signalfd_siginfo si;
        while (::read(sfd, &si, sizeof si) == sizeof si) {
          if (si.ssi_signo == SIGUSR1) {
            if (log) std::fflush(log);
            emit(emu.counters_json("counters"));
          } else {
            running = false;
          }
        }
      }
    }
    arm(tfd, emu.deliver_due());
    if (log) {
      const int64_t now = mono_ns();
      if (now - last_flush > 250000000) {
        std::fflush(log);
        last_flush = now;
      }
    }
  }
  if (log) std::fclose(log);
  const int swept = sweep_namespaces(client.netns_ino, server.netns_ino);
  std::string exit_json = emu.counters_json("exit");
  exit_json.insert(exit_json.size() - 1, ",\"killedLeftovers\":" + std::to_string(swept));
  emit(exit_json);
  return 0;
}

}  // namespace
}  // namespace linkemu

int main(int argc, char** argv) { return linkemu::run(argc, argv); }
