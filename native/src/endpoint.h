// Endpoint: one UDP socket + one listening TCP socket + the table of outstanding 8-byte request IDs.
//
// Everything runs on the JavaScript thread's libuv loop (uv_poll_t, no threads). Work done inside I/O
// callbacks only queues events; a uv_check_t (after the poll phase) and a uv_idle_t (so a queued event
// never waits for the next I/O) deliver everything queued in one loop iteration with ONE call into
// JavaScript: dispatch(ints: Int32Array, ts: BigInt64Array, data: Buffer | undefined, objs: unknown[]).
// See native/index.ts for the layout; the TypeScript wrapper turns it into Incoming[].
#pragma once

#include <napi.h>
#include <uv.h>

#include <sys/socket.h>

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sockaddr.h"

namespace catp {

// Event kinds as they cross into JavaScript (must match native/index.ts).
enum EventKind : int32_t {
  kEvDatagram = 0,  // [kind, peerIdx, dataOff, dataLen, 0, 0], ts = rxNs
  kEvTcpOpen = 1,   // [kind, conn, peerIdx, inbound, 0, 0]
  kEvTcpData = 2,   // [kind, conn, dataOff, dataLen, 0, 0], ts = rxNs
  kEvTcpClosed = 3, // [kind, conn, errno (0 = clean), codeIdx, messageIdx, 0]
  kEvIcmp = 4,      // [kind, peerIdx, errno, codeIdx, 0, 0]
};
constexpr int kIntsPerEvent = 6;

struct Counters {
  uint64_t udpReceived = 0, udpMatched = 0, udpUnmatched = 0, udpMalformed = 0, kernelDrops = 0,
           icmpErrors = 0, udpSent = 0, tcpAccepted = 0, tcpRejected = 0, tcpConnected = 0,
           tcpBytesReceived = 0, tcpBytesSent = 0, batches = 0, tcpTimestampFallback = 0;
};

// Growable byte buffer without zero-filling (we read straight into its tail).
class ByteBuf {
 public:
  ByteBuf() = default;
  ByteBuf(const ByteBuf&) = delete;
  ByteBuf& operator=(const ByteBuf&) = delete;
  ~ByteBuf() { std::free(p_); }
  uint8_t* data() { return p_; }
  size_t size() const { return size_; }
  size_t capacity() const { return cap_; }
  uint8_t* tail(size_t need);  // ensures room for `need` more bytes, returns the write position
  void commit(size_t n) { size_ += n; }
  void append(const uint8_t* src, size_t n);
  void clear() { size_ = 0; }
  void release();  // frees the storage

 private:
  uint8_t* p_ = nullptr;
  size_t size_ = 0, cap_ = 0;
};

class Endpoint;

struct Conn {
  enum class State { Pending, Connecting, Open };
  Endpoint* owner = nullptr;
  int32_t id = 0;
  int fd = -1;
  uv_poll_t* poll = nullptr;
  int pollEvents = -1;  // what the poll handle currently watches; -1 = stopped
  State state = State::Pending;
  bool inbound = false;
  bool closing = false;  // closeConnection(): flush, then close
  uint8_t head[8] = {};
  size_t headLen = 0;
  uint64_t deadline = 0;  // uv_now() ms, pending inbound only
  SockAddr peer;
  std::deque<std::vector<uint8_t>> out;
  size_t outOffset = 0;  // into out.front()
  size_t outBytes = 0;
};

struct IdHash {
  size_t operator()(uint64_t v) const {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdULL;
    v ^= v >> 33;
    return static_cast<size_t>(v);
  }
};

class Endpoint : public Napi::ObjectWrap<Endpoint> {
 public:
  static Napi::Function Init(Napi::Env env);
  explicit Endpoint(const Napi::CallbackInfo& info);
  ~Endpoint() override;

  // libuv callbacks (static trampolines call these).
  void OnUdp(int status, int events);
  void OnListen(int status, int events);
  void OnConn(Conn* c, int status, int events);
  void OnTimer();
  void Flush();

 private:
  // JavaScript methods.
  Napi::Value Address(const Napi::CallbackInfo& info);
  Napi::Value Expect(const Napi::CallbackInfo& info);
  Napi::Value Forget(const Napi::CallbackInfo& info);
  Napi::Value Outstanding(const Napi::CallbackInfo& info);
  Napi::Value SendDatagram(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value SendTcp(const Napi::CallbackInfo& info);
  Napi::Value CloseConnection(const Napi::CallbackInfo& info);
  Napi::Value GetCounters(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);

  void CheckOpen(Napi::Env env) const;
  void Open(Napi::Env env);
  int OpenSocket(Napi::Env env, int type, uint16_t* boundPort);
  void Cleanup();

  // UDP.
  void ReadDatagrams();
  void DrainErrQueue();
  void RestartUdpPoll();

  // TCP.
  void AcceptAll();
  Conn* NewConn(int fd, Conn::State state, bool inbound, const SockAddr& peer);
  bool ReadHead(Conn* c);
  bool ReadConn(Conn* c);
  bool WriteConn(Conn* c);
  bool FinishConnect(Conn* c);
  void UpdatePoll(Conn* c);
  void DestroyConn(Conn* c, bool emit, int err, const char* syscall, bool reset);
  void Reject(Conn* c);
  void RearmTimer();
  ssize_t RecvStamped(int fd, uint8_t* buf, size_t len, int64_t* ts);

  // Event queue.
  void Wake();
  int32_t PushPeer(const sockaddr_storage& ss, socklen_t len);
  int32_t PushString(std::string s);
  void PushEvent(int32_t kind, int32_t a, int32_t b, int32_t c, int32_t d, int64_t ts);

  Napi::FunctionReference dispatch_;
  std::unique_ptr<Napi::AsyncContext> asyncContext_;
  uv_loop_t* loop_ = nullptr;
  bool closed_ = false;
  bool referenced_ = false;

  std::string host_;
  SockAddr bindAddr_;
  bool dualStack_ = false;
  uint16_t udpPort_ = 0, tcpPort_ = 0;
  uint32_t acceptDeadlineMs_ = 2000;
  size_t maxPending_ = 64;
  unsigned recvBatch_ = 64;

  int udpFd_ = -1, listenFd_ = -1, reserveFd_ = -1;
  uv_poll_t* udpPoll_ = nullptr;
  uv_poll_t* listenPoll_ = nullptr;
  uv_timer_t* timer_ = nullptr;
  uv_idle_t* idle_ = nullptr;
  uv_check_t* check_ = nullptr;
  bool wakeArmed_ = false;

  std::unordered_set<uint64_t, IdHash> ids_;
  std::unordered_map<int32_t, Conn*> conns_;
  std::vector<Conn*> pending_;
  int32_t nextConn_ = 1;
  Counters counters_;

  // recvmmsg slots, allocated once.
  std::vector<mmsghdr> msgs_;
  std::vector<iovec> iovs_;
  std::vector<sockaddr_storage> names_;
  std::unique_ptr<uint8_t[]> slab_;
  std::unique_ptr<uint8_t[]> control_;

  // Queued events for the next crossing.
  std::vector<int32_t> evInts_;
  std::vector<int64_t> evTs_;
  ByteBuf stage_;
  struct Obj {
    std::string s;
    double n;
    bool isString;
  };
  std::vector<Obj> objs_;
  SockAddr lastPeer_;
  int32_t lastPeerIdx_ = -1;
};

}  // namespace catp
