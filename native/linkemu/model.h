// The pure part of the link emulator: seeded random streams, the loss and reorder draws, and the rate
// limiter with its bounded tail-drop queue. No system calls here, so the same code answers
// `catp-linkemu --dry-run-loss` (the drop pattern without a network) and the live emulator.
//
// Replay ("the same drop pattern"), precisely: in each direction the IPv4 packets that the emulator
// reads from that direction's TUN are numbered k = 0, 1, 2, ... in the order read. Packet k's random fate
// (lost or not; held back for reordering or not) is a function of (seed, direction, k, loss and reorder
// settings) only: never of time, size, queue state or the other direction. Each direction has two
// independent streams, one for loss and one for reordering, and every packet consumes the same number of
// draws from each (Bernoulli: 1 loss draw; Gilbert-Elliott: 2 loss draws, transition then loss; reorder:
// 1 draw when reordering is on), whether or not it is dropped. So two runs with the same seed and
// settings that push the same packet sequence through a direction drop the same indices k.
// Tail drops at the queue are NOT random: they follow from timing and are logged with their own reason.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

namespace linkemu {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Stream ids: direction * 2 + purpose.
enum Stream : uint64_t { kC2sLoss = 0, kC2sReorder = 1, kS2cLoss = 2, kS2cReorder = 3 };

// xoshiro256** seeded from splitmix64: state word i = splitmix64 output i of the sequence started at
// splitmix64(seed) + stream * 0x9E3779B97F4A7C15 * 2 + 1 (distinct seeds and streams give distinct sequences).
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream) {
    uint64_t x = seed;
    uint64_t base = splitmix64(x) + stream * 0x3C6EF372FE94F82Aull + 1;
    for (auto& w : s_) w = splitmix64(base);
  }
  uint64_t next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

struct LossParams {
  enum Kind { kNone, kBernoulli, kGilbertElliott } kind = kNone;
  double p = 0;           // Bernoulli loss probability
  double p_gb = 0;        // Gilbert-Elliott: P(good -> bad) per packet
  double p_bg = 0;        // P(bad -> good) per packet
  double loss_good = 0;   // loss probability in the good state
  double loss_bad = 1;    // loss probability in the bad state
};

class LossGen {
 public:
  LossGen(const LossParams& p, uint64_t seed, uint64_t stream) : p_(p), rng_(seed, stream) {}
  // The fate of the next packet (index k = number of earlier calls).
  bool next() {
    switch (p_.kind) {
      case LossParams::kNone:
        return false;
      case LossParams::kBernoulli:
        return rng_.uniform() < p_.p;
      case LossParams::kGilbertElliott: {
        // The state starts good; packet k first moves the chain one step, then draws its loss in the new state.
        const double t = rng_.uniform();
        if (bad_) {
          if (t < p_.p_bg) bad_ = false;
        } else {
          if (t < p_.p_gb) bad_ = true;
        }
        const double u = rng_.uniform();
        return u < (bad_ ? p_.loss_bad : p_.loss_good);
      }
    }
    return false;
  }
  bool in_bad_state() const { return bad_; }

 private:
  LossParams p_;
  Rng rng_;
  bool bad_ = false;
};

class ReorderGen {
 public:
  ReorderGen(double p, uint64_t seed, uint64_t stream) : p_(p), rng_(seed, stream) {}
  bool next() { return p_ > 0 && rng_.uniform() < p_; }

 private:
  double p_;
  Rng rng_;
};

// Rate limiter: one FIFO bottleneck that serializes packets at `rate` bytes/s (the IP packet's length,
// no link-layer overhead). The backlog is every admitted packet whose serialization has not finished
// (the one on the wire included). A packet is dropped at the tail if admitting it would push the backlog
// over `queue_bytes` or over `queue_packets` (0 = that bound is off). rate == 0 means unlimited: no
// serialization delay and no queue.
class Shaper {
 public:
  Shaper(uint64_t rate, uint64_t queue_bytes, uint64_t queue_packets)
      : rate_(rate), queue_bytes_(queue_bytes), queue_packets_(queue_packets) {}

  // Returns false (tail drop) or true with *finish = when the packet's last byte leaves the bottleneck.
  bool admit(int64_t now, uint32_t size, int64_t* finish) {
    if (rate_ == 0) {
      *finish = now;
      return true;
    }
    while (!inq_.empty() && inq_.front().first <= now) {
      backlog_ -= inq_.front().second;
      inq_.pop_front();
    }
    if (queue_bytes_ && backlog_ + size > queue_bytes_) return false;
    if (queue_packets_ && inq_.size() + 1 > queue_packets_) return false;
    int64_t start;
    if (last_finish_ > now) {
      start = last_finish_;  // back to back: carry the sub-nanosecond remainder
    } else {
      start = now;
      carry_ = 0;
    }
    const unsigned __int128 num = static_cast<unsigned __int128>(size) * 1000000000u + carry_;
    const uint64_t ser = static_cast<uint64_t>(num / rate_);
    carry_ = static_cast<uint64_t>(num % rate_);
    last_finish_ = start + static_cast<int64_t>(ser);
    inq_.emplace_back(last_finish_, size);
    backlog_ += size;
    if (backlog_ > max_backlog_) max_backlog_ = backlog_;
    *finish = last_finish_;
    return true;
  }
  uint64_t backlog_bytes() const { return backlog_; }
  uint64_t max_backlog_bytes() const { return max_backlog_; }

 private:
  uint64_t rate_, queue_bytes_, queue_packets_;
  std::deque<std::pair<int64_t, uint32_t>> inq_;
  uint64_t backlog_ = 0, max_backlog_ = 0, carry_ = 0;
  int64_t last_finish_ = 0;
};

}  // namespace linkemu
