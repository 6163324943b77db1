#include "endpoint.h"

#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/tcp.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "errors.h"

namespace catp {

namespace {

constexpr size_t kSlotSize = 2048;             // > MAX_DATAGRAM_PAYLOAD (1460); bigger = MSG_TRUNC
constexpr size_t kControlSize = 128;           // per slot: SCM_TIMESTAMPNS + SO_RXQ_OVFL
constexpr int kMaxRecvRounds = 16;             // recvmmsg calls per readable callback
constexpr size_t kTcpReadChunk = 64 * 1024;    // one TCP read
constexpr int kTcpReadsPerCallback = 4;        // per connection per callback
constexpr size_t kStageCap = 16 * 1024 * 1024; // bytes queued for one crossing; reading pauses above
constexpr size_t kMaxQueued = 64 * 1024 * 1024;  // per-connection outgoing queue
constexpr int kAcceptsPerCallback = 256;
constexpr int kBindAttempts = 32;
constexpr int kRcvBuf = 4 * 1024 * 1024;

template <typename T>
void CloseHandle(T* handle) {
  uv_close(reinterpret_cast<uv_handle_t*>(handle),
           [](uv_handle_t* h) { delete reinterpret_cast<T*>(h); });
}

int64_t RealtimeNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

uint64_t ReadId(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

uint16_t RandomPort() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof r)) {
    r = static_cast<uint32_t>(RealtimeNs() ^ (RealtimeNs() >> 29)) * 2654435761u;
  }
  return static_cast<uint16_t>(1024 + r % (65536 - 1024));
}

int SocketError(int fd) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

void SetInt(int fd, int level, int name, int value) {
  setsockopt(fd, level, name, &value, sizeof value);  // best effort
}

void ResetAndClose(int fd) {
  linger l{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

bool IsTransientIcmpErrno(int err) {
  return err == ECONNREFUSED || err == EHOSTUNREACH || err == ENETUNREACH || err == EHOSTDOWN ||
         err == ENETDOWN || err == EPROTO || err == ENOPROTOOPT;
}

Napi::Uint8Array BytesArg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  Napi::Value v = info[i];
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
    ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", std::string(what) + " must be a Uint8Array");
  }
  return v.As<Napi::Uint8Array>();
}

uint64_t IdArg(const Napi::CallbackInfo& info) {
  Napi::Uint8Array id = BytesArg(info, 0, "id");
  if (id.ByteLength() != 8) ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", "id must be 8 bytes");
  return ReadId(id.Data());
}

std::string StringArg(const Napi::CallbackInfo& info, size_t i, const char* what) {
  if (!info[i].IsString()) {
    ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", std::string(what) + " must be a string");
  }
  return info[i].As<Napi::String>().Utf8Value();
}

uint16_t PortArg(const Napi::CallbackInfo& info, size_t i) {
  double p = info[i].IsNumber() ? info[i].As<Napi::Number>().DoubleValue() : -1;
  if (!(p >= 1 && p <= 65535) || p != static_cast<double>(static_cast<int>(p))) {
    ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", "port must be an integer in 1..65535");
  }
  return static_cast<uint16_t>(p);
}

int32_t ConnArg(const Napi::CallbackInfo& info) {
  double c = info[0].IsNumber() ? info[0].As<Napi::Number>().DoubleValue() : -1;
  if (!(c >= 1 && c <= 2147483647.0) || c != static_cast<double>(static_cast<int32_t>(c))) {
    ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", "conn must be a connection number");
  }
  return static_cast<int32_t>(c);
}

double OptionNumber(Napi::Env env, Napi::Object opts, const char* name, double def, double lo,
                    double hi) {
  Napi::Value v = opts.Get(name);
  if (v.IsUndefined()) return def;
  double d = v.IsNumber() ? v.As<Napi::Number>().DoubleValue() : -1;
  if (!(d >= lo && d <= hi) || d != static_cast<double>(static_cast<int64_t>(d))) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG",
              std::string("options.") + name + " must be an integer in " + std::to_string(int64_t(lo)) +
                  ".." + std::to_string(int64_t(hi)));
  }
  return d;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// ByteBuf

uint8_t* ByteBuf::tail(size_t need) {
  if (cap_ - size_ < need) {
    size_t cap = std::max<size_t>(cap_ * 2, std::max<size_t>(size_ + need, 64 * 1024));
    void* p = std::realloc(p_, cap);
    if (p == nullptr) throw std::bad_alloc();
    p_ = static_cast<uint8_t*>(p);
    cap_ = cap;
  }
  return p_ + size_;
}

void ByteBuf::append(const uint8_t* src, size_t n) {
  std::memcpy(tail(n), src, n);
  size_ += n;
}

void ByteBuf::release() {
  std::free(p_);
  p_ = nullptr;
  size_ = cap_ = 0;
}

// ---------------------------------------------------------------------------------------------------
// Construction and teardown

Napi::Function Endpoint::Init(Napi::Env env) {
  return DefineClass(env, "Endpoint",
                     {
                         InstanceMethod<&Endpoint::Address>("address"),
                         InstanceMethod<&Endpoint::Expect>("expect"),
                         InstanceMethod<&Endpoint::Forget>("forget"),
                         InstanceMethod<&Endpoint::Outstanding>("outstanding"),
                         InstanceMethod<&Endpoint::SendDatagram>("sendDatagram"),
                         InstanceMethod<&Endpoint::Connect>("connect"),
                         InstanceMethod<&Endpoint::SendTcp>("sendTcp"),
                         InstanceMethod<&Endpoint::CloseConnection>("closeConnection"),
                         InstanceMethod<&Endpoint::GetCounters>("counters"),
                         InstanceMethod<&Endpoint::Close>("close"),
                     });
}

Endpoint::Endpoint(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Endpoint>(info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject() || !info[1].IsFunction()) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "new Endpoint(options, dispatch)");
  }
  Napi::Object opts = info[0].As<Napi::Object>();
  Napi::Value host = opts.Get("host");
  if (host.IsUndefined()) {
    host_ = "127.0.0.1";
  } else if (host.IsString()) {
    host_ = host.As<Napi::String>().Utf8Value();
  } else {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "options.host must be a string");
  }
  if (!ParseAddress(host_, 0, &bindAddr_)) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG",
              "options.host must be an IPv4 or IPv6 address literal, got '" + host_ + "'");
  }
  dualStack_ = bindAddr_.family() == AF_INET6 && bindAddr_.isAny();
  acceptDeadlineMs_ =
      static_cast<uint32_t>(OptionNumber(env, opts, "acceptDeadlineMs", 2000, 1, 3600000));
  maxPending_ = static_cast<size_t>(OptionNumber(env, opts, "maxPendingConnections", 64, 1, 65536));
  recvBatch_ = static_cast<unsigned>(OptionNumber(env, opts, "recvBatch", 64, 1, 1024));

  if (napi_get_uv_event_loop(env, &loop_) != napi_ok || loop_ == nullptr) {
    ThrowCode(env, "NATIVE_ERR_NO_LOOP", "no libuv event loop in this environment");
  }
  dispatch_ = Napi::Persistent(info[1].As<Napi::Function>());
  asyncContext_ = std::make_unique<Napi::AsyncContext>(env, "catp:native-endpoint", info.This().As<Napi::Object>());

  try {
    Open(env);
  } catch (...) {
    Cleanup();
    throw;
  }
  // While open, the endpoint keeps itself (and the event loop, through its poll handles) alive, like
  // a listening net.Server. close() drops both.
  Ref();
  referenced_ = true;
}

Endpoint::~Endpoint() {
  // Runs from the GC finalizer or at environment teardown: never call into JavaScript here.
  if (!closed_) Cleanup();
  // At teardown napi_async_destroy may not be safe any more; the context is tiny, let it go.
  if (asyncContext_) (void)asyncContext_.release();
}

int Endpoint::OpenSocket(Napi::Env env, int type, uint16_t* boundPort) {
  bool stream = type == SOCK_STREAM;
  int lastErr = 0;
  const char* lastCall = "bind";
  for (int attempt = 0; attempt <= kBindAttempts; ++attempt) {
    bool fallback = attempt == kBindAttempts;  // port 0: the kernel's ephemeral range (>= 32768)
    int fd = socket(bindAddr_.family(), type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) ThrowErrno(env, errno, "socket");
    if (dualStack_) SetInt(fd, IPPROTO_IPV6, IPV6_V6ONLY, 0);
    if (stream) {
      SetInt(fd, SOL_SOCKET, SO_REUSEADDR, 1);
    } else {
      SetInt(fd, SOL_SOCKET, SO_RCVBUFFORCE, kRcvBuf);  // needs CAP_NET_ADMIN; then the capped one
      int have = 0;
      socklen_t hl = sizeof have;
      if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &have, &hl) != 0 || have < kRcvBuf) {
        SetInt(fd, SOL_SOCKET, SO_RCVBUF, kRcvBuf);
      }
      SetInt(fd, SOL_SOCKET, SO_TIMESTAMPNS, 1);
      SetInt(fd, SOL_SOCKET, SO_RXQ_OVFL, 1);
      if (bindAddr_.family() == AF_INET6) {
        SetInt(fd, IPPROTO_IPV6, IPV6_RECVERR, 1);
        if (dualStack_) SetInt(fd, IPPROTO_IP, IP_RECVERR, 1);  // ICMPv4 for v4-mapped peers
      } else {
        SetInt(fd, IPPROTO_IP, IP_RECVERR, 1);
      }
    }
    SockAddr addr = bindAddr_;
    addr.setPort(fallback ? 0 : RandomPort());
    int rc = bind(fd, reinterpret_cast<const sockaddr*>(&addr.ss), addr.len);
    lastCall = "bind";
    if (rc == 0 && stream) {
      rc = listen(fd, 511);
      lastCall = "listen";
    }
    if (rc == 0) {
      SockAddr got;
      got.len = sizeof got.ss;
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&got.ss), &got.len) != 0) {
        int err = errno;
        close(fd);
        ThrowErrno(env, err, "getsockname");
      }
      *boundPort = got.port();
      return fd;
    }
    lastErr = errno;
    close(fd);
    if (lastErr != EADDRINUSE && lastErr != EACCES) break;
  }
  ThrowErrno(env, lastErr, lastCall);
}

void Endpoint::Open(Napi::Env env) {
  udpFd_ = OpenSocket(env, SOCK_DGRAM, &udpPort_);
  listenFd_ = OpenSocket(env, SOCK_STREAM, &tcpPort_);
  reserveFd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);  // spare fd for shedding load on EMFILE

  msgs_.resize(recvBatch_);
  iovs_.resize(recvBatch_);
  names_.resize(recvBatch_);
  slab_.reset(new uint8_t[recvBatch_ * kSlotSize]);
  control_.reset(new uint8_t[recvBatch_ * kControlSize]);
  for (unsigned i = 0; i < recvBatch_; ++i) {
    iovs_[i].iov_base = slab_.get() + i * kSlotSize;
    iovs_[i].iov_len = kSlotSize;
  }

  udpPoll_ = new uv_poll_t;
  uv_poll_init_socket(loop_, udpPoll_, udpFd_);
  udpPoll_->data = this;
  listenPoll_ = new uv_poll_t;
  uv_poll_init_socket(loop_, listenPoll_, listenFd_);
  listenPoll_->data = this;
  timer_ = new uv_timer_t;
  uv_timer_init(loop_, timer_);
  timer_->data = this;
  uv_unref(reinterpret_cast<uv_handle_t*>(timer_));  // a deadline alone never keeps the loop alive
  idle_ = new uv_idle_t;
  uv_idle_init(loop_, idle_);
  idle_->data = this;
  check_ = new uv_check_t;
  uv_check_init(loop_, check_);
  check_->data = this;

  RestartUdpPoll();
  uv_poll_start(listenPoll_, UV_READABLE, [](uv_poll_t* h, int status, int events) {
    static_cast<Endpoint*>(h->data)->OnListen(status, events);
  });
}

void Endpoint::Cleanup() {
  closed_ = true;
  if (udpPoll_ != nullptr) CloseHandle(udpPoll_);
  if (listenPoll_ != nullptr) CloseHandle(listenPoll_);
  if (timer_ != nullptr) CloseHandle(timer_);
  if (idle_ != nullptr) CloseHandle(idle_);
  if (check_ != nullptr) CloseHandle(check_);
  udpPoll_ = listenPoll_ = nullptr;
  timer_ = nullptr;
  idle_ = nullptr;
  check_ = nullptr;
  for (auto& entry : conns_) {
    Conn* c = entry.second;
    if (c->poll != nullptr) CloseHandle(c->poll);
    if (c->state == Conn::State::Pending) {
      ResetAndClose(c->fd);
    } else {
      close(c->fd);
    }
    delete c;
  }
  conns_.clear();
  pending_.clear();
  for (int* fd : {&udpFd_, &listenFd_, &reserveFd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
  ids_.clear();
  evInts_.clear();
  evTs_.clear();
  objs_.clear();
  stage_.release();
  msgs_.clear();
  iovs_.clear();
  names_.clear();
  slab_.reset();
  control_.reset();
}

void Endpoint::CheckOpen(Napi::Env env) const {
  if (closed_) ThrowCode(env, "NATIVE_ERR_CLOSED", "the endpoint is closed");
}

Napi::Value Endpoint::Close(const Napi::CallbackInfo& info) {
  if (!closed_) {
    Cleanup();
    dispatch_.Reset();
    asyncContext_.reset();
  }
  if (referenced_) {
    referenced_ = false;
    Unref();
  }
  return info.Env().Undefined();
}

// ---------------------------------------------------------------------------------------------------
// Small JavaScript methods

Napi::Value Endpoint::Address(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("host", host_);
  o.Set("udpPort", udpPort_);
  o.Set("tcpPort", tcpPort_);
  return o;
}

Napi::Value Endpoint::Expect(const Napi::CallbackInfo& info) {
  CheckOpen(info.Env());
  ids_.insert(IdArg(info));
  return info.Env().Undefined();
}

Napi::Value Endpoint::Forget(const Napi::CallbackInfo& info) {
  CheckOpen(info.Env());
  ids_.erase(IdArg(info));
  return info.Env().Undefined();
}

Napi::Value Endpoint::Outstanding(const Napi::CallbackInfo& info) {
  CheckOpen(info.Env());
  return Napi::Number::New(info.Env(), static_cast<double>(ids_.size()));
}

Napi::Value Endpoint::GetCounters(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  Napi::Object o = Napi::Object::New(env);
  const Counters& k = counters_;
  auto set = [&](const char* name, uint64_t v) { o.Set(name, static_cast<double>(v)); };
  set("udpReceived", k.udpReceived);
  set("udpMatched", k.udpMatched);
  set("udpUnmatched", k.udpUnmatched);
  set("udpMalformed", k.udpMalformed);
  set("kernelDrops", k.kernelDrops);
  set("icmpErrors", k.icmpErrors);
  set("udpSent", k.udpSent);
  set("tcpAccepted", k.tcpAccepted);
  set("tcpRejected", k.tcpRejected);
  set("tcpConnected", k.tcpConnected);
  set("tcpBytesReceived", k.tcpBytesReceived);
  set("tcpBytesSent", k.tcpBytesSent);
  set("batches", k.batches);
  set("tcpTimestampFallback", k.tcpTimestampFallback);
  return o;
}

// ---------------------------------------------------------------------------------------------------
// Event queue and the one crossing into JavaScript

void Endpoint::Wake() {
  if (wakeArmed_ || closed_) return;
  wakeArmed_ = true;
  uv_check_start(check_, [](uv_check_t* h) { static_cast<Endpoint*>(h->data)->Flush(); });
  // An active idle handle makes the next poll non-blocking, so events queued outside the poll phase
  // (timers, synchronous connect failures) are not held until the next I/O.
  uv_idle_start(idle_, [](uv_idle_t* h) { static_cast<Endpoint*>(h->data)->Flush(); });
}

void Endpoint::PushEvent(int32_t kind, int32_t a, int32_t b, int32_t c, int32_t d, int64_t ts) {
  evInts_.insert(evInts_.end(), {kind, a, b, c, d, 0});
  evTs_.push_back(ts);
  Wake();
}

int32_t Endpoint::PushPeer(const sockaddr_storage& ss, socklen_t len) {
  if (lastPeerIdx_ >= 0 && lastPeer_.sameAs(ss, len)) return lastPeerIdx_;
  PeerInfo p = DescribePeer(ss, len);
  int32_t idx = static_cast<int32_t>(objs_.size());
  objs_.push_back({std::move(p.address), 0, true});
  objs_.push_back({std::string(), static_cast<double>(p.port), false});
  objs_.push_back({std::string(), static_cast<double>(p.family), false});
  std::memcpy(&lastPeer_.ss, &ss, std::min<size_t>(len, sizeof ss));
  lastPeer_.len = len;
  lastPeerIdx_ = idx;
  return idx;
}

int32_t Endpoint::PushString(std::string s) {
  objs_.push_back({std::move(s), 0, true});
  return static_cast<int32_t>(objs_.size() - 1);
}

void Endpoint::Flush() {
  if (wakeArmed_) {
    uv_check_stop(check_);
    uv_idle_stop(idle_);
    wakeArmed_ = false;
  }
  if (closed_ || evTs_.empty()) return;
  Napi::Env env = Env();
  Napi::HandleScope scope(env);

  size_t n = evTs_.size();
  Napi::Int32Array ints = Napi::Int32Array::New(env, n * kIntsPerEvent);
  std::memcpy(ints.Data(), evInts_.data(), n * kIntsPerEvent * sizeof(int32_t));
  Napi::BigInt64Array ts = Napi::BigInt64Array::New(env, n);
  std::memcpy(ts.Data(), evTs_.data(), n * sizeof(int64_t));
  Napi::Value data = env.Undefined();
  if (stage_.size() > 0) data = Napi::Buffer<uint8_t>::Copy(env, stage_.data(), stage_.size());
  Napi::Array objs = Napi::Array::New(env, objs_.size());
  for (size_t i = 0; i < objs_.size(); ++i) {
    if (objs_[i].isString) {
      objs.Set(static_cast<uint32_t>(i), Napi::String::New(env, objs_[i].s));
    } else {
      objs.Set(static_cast<uint32_t>(i), Napi::Number::New(env, objs_[i].n));
    }
  }
  evInts_.clear();
  evTs_.clear();
  objs_.clear();
  lastPeerIdx_ = -1;
  if (stage_.capacity() > kStageCap * 2) {
    stage_.release();
  } else {
    stage_.clear();
  }
  counters_.batches++;

  // The wrapper's dispatcher catches exceptions from user code; anything that still escapes is
  // reported as an uncaught exception (never left pending inside a libuv callback).
  Napi::Object self = Value();
  try {
    dispatch_.MakeCallback(self, {ints, ts, data, objs}, *asyncContext_);
  } catch (const Napi::Error& e) {
    napi_fatal_exception(env, e.Value());
  }
}

// ---------------------------------------------------------------------------------------------------
// UDP

void Endpoint::RestartUdpPoll() {
  uv_poll_start(udpPoll_, UV_READABLE, [](uv_poll_t* h, int status, int events) {
    static_cast<Endpoint*>(h->data)->OnUdp(status, events);
  });
}

void Endpoint::OnUdp(int status, int events) {
  if (status < 0) {
    // libuv reports POLLERR (a queued ICMP error) as UV_EBADF and stops the handle: drain, restart.
    DrainErrQueue();
    ReadDatagrams();
    if (!closed_) RestartUdpPoll();
    return;
  }
  if (events & UV_READABLE) ReadDatagrams();
}

void Endpoint::ReadDatagrams() {
  for (int round = 0; round < kMaxRecvRounds && !closed_; ++round) {
    if (stage_.size() > kStageCap) return;  // level-triggered: we come back after the crossing
    for (unsigned i = 0; i < recvBatch_; ++i) {
      msghdr& h = msgs_[i].msg_hdr;
      h.msg_name = &names_[i];
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_iov = &iovs_[i];
      h.msg_iovlen = 1;
      h.msg_control = control_.get() + i * kControlSize;
      h.msg_controllen = kControlSize;
      h.msg_flags = 0;
      msgs_[i].msg_len = 0;
    }
    int got = recvmmsg(udpFd_, msgs_.data(), recvBatch_, MSG_DONTWAIT, nullptr);
    if (got < 0) {
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return;
      if (err == EINTR) continue;
      // A pending ICMP error (sk_err) is reported by the next receive call; fetch it from the queue.
      DrainErrQueue();
      continue;
    }
    for (int i = 0; i < got; ++i) {
      const msghdr& h = msgs_[i].msg_hdr;
      size_t len = msgs_[i].msg_len;
      counters_.udpReceived++;
      int64_t ts = 0;
      for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(const_cast<msghdr*>(&h), cm)) {
        if (cm->cmsg_level != SOL_SOCKET) continue;
        if (cm->cmsg_type == SCM_TIMESTAMPNS) {
          timespec t;
          std::memcpy(&t, CMSG_DATA(cm), sizeof t);
          ts = static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
        } else if (cm->cmsg_type == SO_RXQ_OVFL) {
          uint32_t drops;
          std::memcpy(&drops, CMSG_DATA(cm), sizeof drops);
          counters_.kernelDrops = drops;  // cumulative per socket
        }
      }
      if ((h.msg_flags & MSG_TRUNC) || len < 8) {
        counters_.udpMalformed++;
        continue;
      }
      const uint8_t* p = static_cast<const uint8_t*>(h.msg_iov->iov_base);
      if (ids_.find(ReadId(p)) == ids_.end()) {
        counters_.udpUnmatched++;
        continue;
      }
      counters_.udpMatched++;
      if (ts == 0) ts = RealtimeNs();
      int32_t peer = PushPeer(names_[i], h.msg_namelen);
      int32_t off = static_cast<int32_t>(stage_.size());
      stage_.append(p, len);
      PushEvent(kEvDatagram, peer, off, static_cast<int32_t>(len), 0, ts);
    }
    if (static_cast<unsigned>(got) < recvBatch_) return;  // drained (more will wake the poll again)
  }
}

void Endpoint::DrainErrQueue() {
  for (int i = 0; i < 256 && !closed_; ++i) {
    sockaddr_storage name;
    uint8_t payload[64];
    alignas(cmsghdr) uint8_t control[512];
    iovec iov{payload, sizeof payload};
    msghdr h{};
    h.msg_name = &name;
    h.msg_namelen = sizeof name;
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    ssize_t n = recvmsg(udpFd_, &h, MSG_ERRQUEUE | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(&h, cm)) {
      bool v4 = cm->cmsg_level == SOL_IP && cm->cmsg_type == IP_RECVERR;
      bool v6 = cm->cmsg_level == SOL_IPV6 && cm->cmsg_type == IPV6_RECVERR;
      if (!v4 && !v6) continue;
      sock_extended_err ee;
      std::memcpy(&ee, CMSG_DATA(cm), sizeof ee);
      if (ee.ee_origin != SO_EE_ORIGIN_ICMP && ee.ee_origin != SO_EE_ORIGIN_ICMP6) continue;
      counters_.icmpErrors++;
      int err = static_cast<int>(ee.ee_errno);
      int32_t peer = PushPeer(name, h.msg_namelen);
      int32_t code = PushString(ErrnoName(err));
      PushEvent(kEvIcmp, peer, err, code, 0, 0);
    }
  }
  (void)SocketError(udpFd_);  // clear sk_err so POLLERR does not spin
}

Napi::Value Endpoint::SendDatagram(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  Napi::Uint8Array data = BytesArg(info, 0, "data");
  std::string address = StringArg(info, 1, "address");
  uint16_t port = PortArg(info, 2);
  SockAddr dst;
  if (!ParseAddress(address, port, &dst)) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "address must be an IP literal, got '" + address + "'");
  }
  if (bindAddr_.family() == AF_INET6) dst = MapToV6(dst);
  // With IP_RECVERR an earlier ICMP error from ANY peer is also reported by the next send (sk_err);
  // that error is about someone else (and still sits in the error queue), so try again.
  for (int attempt = 0;; ++attempt) {
    ssize_t n = sendto(udpFd_, data.Data(), data.ByteLength(), MSG_DONTWAIT | MSG_NOSIGNAL,
                       reinterpret_cast<const sockaddr*>(&dst.ss), dst.len);
    if (n >= 0) break;
    int err = errno;
    if (err == EINTR || (attempt < 2 && IsTransientIcmpErrno(err))) continue;
    ThrowErrno(env, err, "sendto");
  }
  counters_.udpSent++;
  return env.Undefined();
}

// ---------------------------------------------------------------------------------------------------
// TCP: accept, pending admission, reads, writes, close

Conn* Endpoint::NewConn(int fd, Conn::State state, bool inbound, const SockAddr& peer) {
  while (nextConn_ <= 0 || conns_.count(nextConn_) != 0) {
    nextConn_ = nextConn_ <= 0 || nextConn_ == INT32_MAX ? 1 : nextConn_ + 1;
  }
  Conn* c = new Conn;
  c->owner = this;
  c->id = nextConn_;
  nextConn_ = nextConn_ == INT32_MAX ? 1 : nextConn_ + 1;
  c->fd = fd;
  c->state = state;
  c->inbound = inbound;
  c->peer = peer;
  SetInt(fd, IPPROTO_TCP, TCP_NODELAY, 1);
  SetInt(fd, SOL_SOCKET, SO_TIMESTAMPNS, 1);
  c->poll = new uv_poll_t;
  uv_poll_init_socket(loop_, c->poll, fd);
  c->poll->data = c;
  conns_.emplace(c->id, c);
  return c;
}

void Endpoint::OnListen(int status, int /*events*/) {
  if (status < 0) {
    if (!closed_) {
      uv_poll_start(listenPoll_, UV_READABLE, [](uv_poll_t* h, int st, int ev) {
        static_cast<Endpoint*>(h->data)->OnListen(st, ev);
      });
    }
    (void)SocketError(listenFd_);
  }
  AcceptAll();
}

void Endpoint::AcceptAll() {
  bool added = false;
  for (int i = 0; i < kAcceptsPerCallback && !closed_; ++i) {
    SockAddr peer;
    peer.len = sizeof peer.ss;
    int fd = accept4(listenFd_, reinterpret_cast<sockaddr*>(&peer.ss), &peer.len,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      int err = errno;
      if (err == EINTR || err == ECONNABORTED) continue;
      if ((err == EMFILE || err == ENFILE) && reserveFd_ >= 0) {
        // Out of descriptors: accept-and-drop with the spare one so the backlog does not spin us.
        close(reserveFd_);
        int victim = accept4(listenFd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (victim >= 0) {
          ResetAndClose(victim);
          counters_.tcpRejected++;
        }
        reserveFd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
        continue;
      }
      break;  // EAGAIN or something we cannot fix here
    }
    if (pending_.size() >= maxPending_) {
      ResetAndClose(fd);
      counters_.tcpRejected++;
      continue;
    }
    Conn* c = NewConn(fd, Conn::State::Pending, true, peer);
    c->deadline = uv_now(loop_) + acceptDeadlineMs_;
    pending_.push_back(c);
    UpdatePoll(c);
    added = true;
  }
  if (added) RearmTimer();
}

void Endpoint::RearmTimer() {
  if (closed_) return;
  if (pending_.empty()) {
    uv_timer_stop(timer_);
    return;
  }
  uint64_t earliest = UINT64_MAX;
  for (Conn* c : pending_) earliest = std::min(earliest, c->deadline);
  uint64_t now = uv_now(loop_);
  uv_timer_start(
      timer_, [](uv_timer_t* h) { static_cast<Endpoint*>(h->data)->OnTimer(); },
      earliest > now ? earliest - now : 0, 0);
}

void Endpoint::OnTimer() {
  uint64_t now = uv_now(loop_);
  std::vector<Conn*> expired;
  for (Conn* c : pending_) {
    if (c->deadline <= now) expired.push_back(c);
  }
  for (Conn* c : expired) Reject(c);
  RearmTimer();
}

void Endpoint::Reject(Conn* c) {
  counters_.tcpRejected++;
  DestroyConn(c, false, 0, nullptr, true);
}

void Endpoint::UpdatePoll(Conn* c) {
  int want = 0;
  if (c->state == Conn::State::Connecting) {
    want = UV_WRITABLE;
  } else {
    if (!c->closing) want |= UV_READABLE;
    if (!c->out.empty()) want |= UV_WRITABLE;
  }
  if (want == c->pollEvents) return;
  c->pollEvents = want;
  if (want == 0) {
    uv_poll_stop(c->poll);
    return;
  }
  uv_poll_start(c->poll, want, [](uv_poll_t* h, int status, int events) {
    Conn* conn = static_cast<Conn*>(h->data);
    conn->owner->OnConn(conn, status, events);
  });
}

void Endpoint::DestroyConn(Conn* c, bool emit, int err, const char* syscall, bool reset) {
  if (c->state == Conn::State::Pending) {
    pending_.erase(std::remove(pending_.begin(), pending_.end(), c), pending_.end());
  }
  conns_.erase(c->id);
  CloseHandle(c->poll);
  c->poll = nullptr;
  if (reset) {
    ResetAndClose(c->fd);
  } else {
    close(c->fd);
  }
  if (emit) {
    if (err != 0) {
      int32_t code = PushString(ErrnoName(err));
      int32_t msg = PushString(std::string(syscall != nullptr ? syscall : "tcp") + " " + ErrnoName(err) +
                               ": " + ErrnoMessage(err));
      PushEvent(kEvTcpClosed, c->id, err, code, msg, 0);
    } else {
      PushEvent(kEvTcpClosed, c->id, 0, 0, 0, 0);
    }
  }
  delete c;
}

void Endpoint::OnConn(Conn* c, int status, int events) {
  if (closed_) return;
  if (status < 0) {
    // POLLERR: libuv stopped the handle. Connecting -> the connect failed. Otherwise read what is
    // left (which reports EOF or the error itself), then fail with SO_ERROR if still alive.
    c->pollEvents = -1;
    if (c->state == Conn::State::Connecting) {
      FinishConnect(c);
      return;
    }
    if (c->state == Conn::State::Pending) {
      Reject(c);
      return;
    }
    if (!c->closing && !ReadConn(c)) return;
    int err = SocketError(c->fd);
    if (err != 0) {
      DestroyConn(c, true, err, "read", false);
    } else {
      UpdatePoll(c);
    }
    return;
  }
  if (c->state == Conn::State::Connecting) {
    if (events & (UV_WRITABLE | UV_READABLE | UV_DISCONNECT)) FinishConnect(c);
    return;
  }
  if (events & UV_WRITABLE) {
    if (!WriteConn(c)) return;
  }
  if (events & (UV_READABLE | UV_DISCONNECT)) {
    if (c->state == Conn::State::Pending) {
      if (!ReadHead(c)) return;
    } else if (!c->closing) {
      if (!ReadConn(c)) return;
    }
  }
}

bool Endpoint::FinishConnect(Conn* c) {
  int err = SocketError(c->fd);
  if (err != 0) {
    DestroyConn(c, true, err, "connect", false);
    return false;
  }
  c->state = Conn::State::Open;
  counters_.tcpConnected++;
  PushEvent(kEvTcpOpen, c->id, PushPeer(c->peer.ss, c->peer.len), 0, 0, 0);
  if (!c->out.empty()) return WriteConn(c);
  if (c->closing) {
    DestroyConn(c, true, 0, nullptr, false);
    return false;
  }
  UpdatePoll(c);
  return true;
}

ssize_t Endpoint::RecvStamped(int fd, uint8_t* buf, size_t len, int64_t* ts) {
  alignas(cmsghdr) uint8_t control[kControlSize];
  iovec iov{buf, len};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = control;
  h.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = recvmsg(fd, &h, MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  *ts = 0;
  if (n > 0) {
    for (cmsghdr* cm = CMSG_FIRSTHDR(&h); cm != nullptr; cm = CMSG_NXTHDR(&h, cm)) {
      if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
        timespec t;
        std::memcpy(&t, CMSG_DATA(cm), sizeof t);
        *ts = static_cast<int64_t>(t.tv_sec) * 1000000000LL + t.tv_nsec;
      }
    }
    if (*ts == 0) {
      *ts = RealtimeNs();
      counters_.tcpTimestampFallback++;
    }
  }
  return n;
}

bool Endpoint::ReadHead(Conn* c) {
  int64_t ts = 0;
  ssize_t n = RecvStamped(c->fd, c->head + c->headLen, 8 - c->headLen, &ts);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
  if (n <= 0) {  // closed early or failed
    Reject(c);
    return false;
  }
  c->headLen += static_cast<size_t>(n);
  if (c->headLen < 8) return true;
  if (ids_.find(ReadId(c->head)) == ids_.end()) {
    Reject(c);
    return false;
  }
  // Admitted: the connection is now an ordinary open one, its first 8 bytes included in the data.
  pending_.erase(std::remove(pending_.begin(), pending_.end(), c), pending_.end());
  c->state = Conn::State::Open;
  counters_.tcpAccepted++;
  counters_.tcpBytesReceived += 8;
  PushEvent(kEvTcpOpen, c->id, PushPeer(c->peer.ss, c->peer.len), 1, 0, 0);
  int32_t off = static_cast<int32_t>(stage_.size());
  stage_.append(c->head, 8);
  PushEvent(kEvTcpData, c->id, off, 8, 0, ts);
  RearmTimer();
  return ReadConn(c);
}

bool Endpoint::ReadConn(Conn* c) {
  for (int i = 0; i < kTcpReadsPerCallback; ++i) {
    if (stage_.size() > kStageCap) return true;  // resume after the crossing (level-triggered)
    int64_t ts = 0;
    size_t before = stage_.size();
    ssize_t n = RecvStamped(c->fd, stage_.tail(kTcpReadChunk), kTcpReadChunk, &ts);
    if (n < 0) {
      int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) return true;
      DestroyConn(c, true, err, "read", false);
      return false;
    }
    if (n == 0) {  // peer closed
      DestroyConn(c, true, 0, nullptr, false);
      return false;
    }
    stage_.commit(static_cast<size_t>(n));
    counters_.tcpBytesReceived += static_cast<uint64_t>(n);
    // Extend the previous tcp-data event of this connection when the bytes are contiguous.
    size_t ne = evTs_.size();
    if (ne > 0) {
      int32_t* last = &evInts_[(ne - 1) * kIntsPerEvent];
      if (last[0] == kEvTcpData && last[1] == c->id &&
          static_cast<size_t>(last[2]) + static_cast<size_t>(last[3]) == before) {
        last[3] += static_cast<int32_t>(n);
        if (static_cast<size_t>(n) < kTcpReadChunk) return true;
        continue;
      }
    }
    PushEvent(kEvTcpData, c->id, static_cast<int32_t>(before), static_cast<int32_t>(n), 0, ts);
    if (static_cast<size_t>(n) < kTcpReadChunk) return true;  // drained for now
  }
  return true;
}

bool Endpoint::WriteConn(Conn* c) {
  while (!c->out.empty()) {
    std::vector<uint8_t>& head = c->out.front();
    ssize_t n = send(c->fd, head.data() + c->outOffset, head.size() - c->outOffset,
                     MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      DestroyConn(c, true, err, "write", false);
      return false;
    }
    counters_.tcpBytesSent += static_cast<uint64_t>(n);
    c->outBytes -= static_cast<size_t>(n);
    c->outOffset += static_cast<size_t>(n);
    if (c->outOffset == head.size()) {
      c->out.pop_front();
      c->outOffset = 0;
    }
  }
  if (c->out.empty() && c->closing) {
    // Graceful close: discard whatever the peer sent meanwhile so close() sends FIN, not RST.
    uint8_t sink[4096];
    for (int i = 0; i < 256 && recv(c->fd, sink, sizeof sink, MSG_DONTWAIT) > 0; ++i) {
    }
    DestroyConn(c, true, 0, nullptr, false);
    return false;
  }
  UpdatePoll(c);
  return true;
}

Napi::Value Endpoint::Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  std::string address = StringArg(info, 0, "address");
  uint16_t port = PortArg(info, 1);
  SockAddr dst;
  if (!ParseAddress(address, port, &dst)) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "address must be an IP literal, got '" + address + "'");
  }
  int fd = socket(dst.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) ThrowErrno(env, errno, "socket");
  Conn* c = NewConn(fd, Conn::State::Connecting, false, dst);
  int32_t id = c->id;
  int rc;
  do {
    rc = connect(fd, reinterpret_cast<const sockaddr*>(&dst.ss), dst.len);
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) {
    FinishConnect(c);
  } else if (errno == EINPROGRESS) {
    UpdatePoll(c);
  } else {
    DestroyConn(c, true, errno, "connect", false);  // reported as tcp-closed, never synchronously
  }
  return Napi::Number::New(env, id);
}

Napi::Value Endpoint::SendTcp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  int32_t id = ConnArg(info);
  Napi::Uint8Array data = BytesArg(info, 1, "data");
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->state == Conn::State::Pending) {
    ThrowCode(env, "NATIVE_ERR_NO_CONNECTION", "no open connection " + std::to_string(id));
  }
  Conn* c = it->second;
  if (c->closing) {
    ThrowCode(env, "NATIVE_ERR_CONNECTION_CLOSING", "connection " + std::to_string(id) + " is closing");
  }
  const uint8_t* p = data.Data();
  size_t len = data.ByteLength();
  if (len == 0) return env.Undefined();
  if (c->outBytes + len > kMaxQueued) {
    ThrowCode(env, "NATIVE_ERR_QUEUE_FULL",
              "more than 64 MiB queued on connection " + std::to_string(id));
  }
  if (c->state == Conn::State::Open && c->out.empty()) {
    while (len > 0) {
      ssize_t n = send(c->fd, p, len, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        int err = errno;
        if (err == EINTR) continue;
        if (err == EAGAIN || err == EWOULDBLOCK) break;
        DestroyConn(c, true, err, "write", false);  // reported as tcp-closed with the error
        return env.Undefined();
      }
      counters_.tcpBytesSent += static_cast<uint64_t>(n);
      p += n;
      len -= static_cast<size_t>(n);
    }
    if (len == 0) return env.Undefined();
  }
  c->out.emplace_back(p, p + len);
  c->outBytes += len;
  UpdatePoll(c);
  return env.Undefined();
}

Napi::Value Endpoint::CloseConnection(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  CheckOpen(env);
  int32_t id = ConnArg(info);
  auto it = conns_.find(id);
  if (it == conns_.end() || it->second->state == Conn::State::Pending || it->second->closing) {
    return env.Undefined();  // idempotent
  }
  Conn* c = it->second;
  c->closing = true;
  if (c->state == Conn::State::Open && c->out.empty()) {
    WriteConn(c);  // nothing to flush: closes now
  } else {
    UpdatePoll(c);
  }
  return env.Undefined();
}

}  // namespace catp
