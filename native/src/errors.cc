#include "errors.h"

#include <uv.h>

namespace catp {

std::string ErrnoName(int err) {
  char buf[64];
  return uv_err_name_r(-err, buf, sizeof buf);  // libuv error codes are -errno on Unix
}

std::string ErrnoMessage(int err) {
  char buf[256];
  return uv_strerror_r(-err, buf, sizeof buf);
}

Napi::Value MakeError(Napi::Env env, const std::string& code, const std::string& message, int err,
                      const char* syscall) {
  Napi::Value errnoValue = err != 0 ? Napi::Value(Napi::Number::New(env, err)) : env.Undefined();
  Napi::Value syscallValue =
      syscall != nullptr ? Napi::Value(Napi::String::New(env, syscall)) : env.Undefined();
  AddonData* data = env.GetInstanceData<AddonData>();
  if (data != nullptr && !data->errorFactory.IsEmpty()) {
    return data->errorFactory.Call(
        {Napi::String::New(env, code), Napi::String::New(env, message), errnoValue, syscallValue});
  }
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", code);
  if (err != 0) e.Set("errno", errnoValue);
  if (syscall != nullptr) e.Set("syscall", syscallValue);
  return e.Value();
}

void ThrowErrno(Napi::Env env, int err, const char* syscall) {
  std::string code = ErrnoName(err);
  std::string message = std::string(syscall) + " " + code + ": " + ErrnoMessage(err);
  throw Napi::Error(env, MakeError(env, code, message, err, syscall));
}

void ThrowCode(Napi::Env env, const char* code, const std::string& message) {
  throw Napi::Error(env, MakeError(env, code, message, 0, nullptr));
}

}  // namespace catp
