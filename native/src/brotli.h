// The brotli frame decoder (brotli.cc): exports.brotli = { available, decode? }.
#pragma once

#include <napi.h>

namespace catp {

void InitBrotli(Napi::Env env, Napi::Object exports);

}  // namespace catp
