// Module entry: Endpoint, the two clocks, the brotli frame decoder, and setErrorFactory (lets native/index.ts make native
// errors instances of its NativeError class).
#include <napi.h>
#include <time.h>

#include "brotli.h"
#include "endpoint.h"
#include "errors.h"

namespace catp {
namespace {

Napi::Value ClockNs(const Napi::CallbackInfo& info, clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  uint64_t ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ULL + static_cast<uint64_t>(ts.tv_nsec);
  return Napi::BigInt::New(info.Env(), ns);
}

Napi::Value RealtimeNs(const Napi::CallbackInfo& info) { return ClockNs(info, CLOCK_REALTIME); }
Napi::Value MonotonicNs(const Napi::CallbackInfo& info) { return ClockNs(info, CLOCK_MONOTONIC); }

Napi::Value SetErrorFactory(const Napi::CallbackInfo& info) {
  if (!info[0].IsFunction()) {
    ThrowCode(info.Env(), "NATIVE_ERR_INVALID_ARG", "setErrorFactory(fn) needs a function");
  }
  info.Env().GetInstanceData<AddonData>()->errorFactory = Napi::Persistent(info[0].As<Napi::Function>());
  return info.Env().Undefined();
}

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);  // deleted at environment teardown
  Napi::Function ctor = Endpoint::Init(env);
  data->endpointCtor = Napi::Persistent(ctor);
  exports.Set("Endpoint", ctor);
  exports.Set("realtimeNs", Napi::Function::New<RealtimeNs>(env, "realtimeNs"));
  exports.Set("monotonicNs", Napi::Function::New<MonotonicNs>(env, "monotonicNs"));
  exports.Set("setErrorFactory", Napi::Function::New<SetErrorFactory>(env, "setErrorFactory"));
  InitBrotli(env, exports);
  return exports;
}

}  // namespace
}  // namespace catp

static Napi::Object InitModule(Napi::Env env, Napi::Object exports) { return catp::Init(env, exports); }

NODE_API_MODULE(catp_native, InitModule)
