// brotliDecode(bytes, maxBytes): one CATP frame's brotli payload decoded in one call, for the host's frame codec
// (app/catp-codec.ts). Node's zlib.brotliDecompressSync builds a stream object per call: ~14 µs of a frame's ~25,
// and most of what the assembler spends per frame. Built only where libbrotli's headers are (binding.gyp,
// CATP_HAVE_BROTLI); without them `available` is false and the host keeps Node's decoder.
//
// Input is hostile: the output is bounded by maxBytes (at most 16 MiB), a stream that is corrupt, cut short, asks
// for more output than allowed, or has bytes after its end is refused with NATIVE_ERR_BROTLI and nothing else.
#include "brotli.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "errors.h"

#ifdef CATP_HAVE_BROTLI
#include <brotli/decode.h>
#endif

namespace catp {
namespace {

constexpr uint32_t kMaxOutput = 16u << 20;

#ifdef CATP_HAVE_BROTLI
struct DecoderDeleter {
  void operator()(BrotliDecoderState* s) const { BrotliDecoderDestroyInstance(s); }
};

Napi::Value Decode(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array ||
      !info[1].IsNumber()) {
    ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "brotliDecode(bytes: Uint8Array, maxBytes: number)");
  }
  Napi::Uint8Array in = info[0].As<Napi::Uint8Array>();
  double maxArg = info[1].As<Napi::Number>().DoubleValue();
  if (!(maxArg >= 0) || maxArg > kMaxOutput) ThrowCode(env, "NATIVE_ERR_INVALID_ARG", "maxBytes must be 0 to 16 MiB");
  const size_t maxBytes = static_cast<size_t>(maxArg);
  // one scratch buffer per thread, grown to the largest maxBytes asked for (64 KiB for frames)
  thread_local std::vector<uint8_t> scratch;
  if (scratch.size() < maxBytes + 1) scratch.resize(maxBytes + 1);
  std::unique_ptr<BrotliDecoderState, DecoderDeleter> s(BrotliDecoderCreateInstance(nullptr, nullptr, nullptr));
  if (!s) ThrowCode(env, "NATIVE_ERR_BROTLI", "out of memory");
  size_t availIn = in.ByteLength();
  const uint8_t* nextIn = in.Data();
  // one byte more than allowed: a stream that fills it is too large, not merely exactly maxBytes long
  size_t availOut = maxBytes + 1;
  uint8_t* nextOut = scratch.data();
  BrotliDecoderResult r = BrotliDecoderDecompressStream(s.get(), &availIn, &nextIn, &availOut, &nextOut, nullptr);
  const size_t produced = (maxBytes + 1) - availOut;
  if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT || produced > maxBytes) {
    ThrowCode(env, "NATIVE_ERR_BROTLI", "output larger than " + std::to_string(maxBytes) + " bytes");
  }
  if (r == BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT) ThrowCode(env, "NATIVE_ERR_BROTLI", "stream cut short");
  if (r != BROTLI_DECODER_RESULT_SUCCESS) {
    ThrowCode(env, "NATIVE_ERR_BROTLI", std::string("corrupt stream: ") + BrotliDecoderErrorString(BrotliDecoderGetErrorCode(s.get())));
  }
  if (availIn != 0) ThrowCode(env, "NATIVE_ERR_BROTLI", "bytes after the end of the stream");
  Napi::ArrayBuffer out = Napi::ArrayBuffer::New(env, produced);
  if (produced > 0) std::memcpy(out.Data(), scratch.data(), produced);
  return Napi::Uint8Array::New(env, produced, out, 0);
}
#endif

}  // namespace

void InitBrotli(Napi::Env env, Napi::Object exports) {
  Napi::Object b = Napi::Object::New(env);
#ifdef CATP_HAVE_BROTLI
  b.Set("available", Napi::Boolean::New(env, true));
  b.Set("decode", Napi::Function::New<Decode>(env, "brotliDecode"));
#else
  b.Set("available", Napi::Boolean::New(env, false));
#endif
  exports.Set("brotli", b);
}

}  // namespace catp
