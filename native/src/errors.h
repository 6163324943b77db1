// Errors thrown to JavaScript. Every error carries `code` (an errno name such as 'EADDRINUSE', or
// 'NATIVE_ERR_*'), and for system errors `errno` and `syscall`; the message includes strerror().
// When the TypeScript wrapper has registered its NativeError class (setErrorFactory), errors are
// instances of it; otherwise they are plain Errors with the same properties.
#pragma once

#include <napi.h>

#include <string>

namespace catp {

// Per-environment state (Node main thread, each worker, each Electron context gets its own).
struct AddonData {
  Napi::FunctionReference errorFactory;  // (code, message, errno?, syscall?) => Error
  Napi::FunctionReference endpointCtor;
};

std::string ErrnoName(int err);     // 'ECONNREFUSED'
std::string ErrnoMessage(int err);  // 'connection refused'

Napi::Value MakeError(Napi::Env env, const std::string& code, const std::string& message, int err,
                      const char* syscall);

[[noreturn]] void ThrowErrno(Napi::Env env, int err, const char* syscall);
[[noreturn]] void ThrowCode(Napi::Env env, const char* code, const std::string& message);

}  // namespace catp
