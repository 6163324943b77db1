# catp_native: the UDP+TCP transport endpoint (Linux only: recvmmsg, SO_RXQ_OVFL, IP_RECVERR; N-API via node-addon-api, one build for
# Node and Electron). C++ exceptions are ENABLED (NAPI_CPP_EXCEPTIONS): every failure is thrown as a
# Napi::Error and node-addon-api turns it into a JS exception at the method boundary.
{
  'targets': [
    {
      'target_name': 'catp_native',
      'sources': [
        'native/src/addon.cc',
        'native/src/brotli.cc',
        'native/src/endpoint.cc',
        'native/src/errors.cc',
        'native/src/sockaddr.cc',
      ],
      'include_dirs': ["<!(node -p \"require('node-addon-api').include_dir\")"],
      'defines': [
        'NAPI_VERSION=8',
        'NAPI_CPP_EXCEPTIONS',
        'NODE_ADDON_API_DISABLE_DEPRECATED',
        'NODE_API_NO_EXTERNAL_BUFFERS_ALLOWED',
      ],
      'cflags!': ['-fno-exceptions', '-Wno-unused-parameter'],
      'cflags_cc!': ['-fno-exceptions', '-std=gnu++17'],
      'cflags': ['-Wall', '-Wextra'],
      'cflags_cc': ['-std=c++17', '-fexceptions', '-Wall', '-Wextra'],
      # libbrotli (Debian: libbrotli-dev) decodes CATP frames without Node's per-call stream object; without its
      # headers the addon builds without it and the host keeps Node's decoder (native/src/brotli.cc).
      'conditions': [
        ['<!(node native/has-brotli.js)==1', {
          'defines': ['CATP_HAVE_BROTLI'],
          'libraries': ['-lbrotlidec'],
        }],
      ],
    },
    {
      # catp-linkemu: the lab's link emulator, a plain program (not part of the addon): two network
      # namespaces, a TUN device in each, delay / rate / queue / loss / reordering per direction.
      'target_name': 'catp-linkemu',
      'type': 'executable',
      'sources': [
        'native/linkemu/main.cc',
        'native/linkemu/setup.cc',
      ],
      'cflags!': ['-fno-exceptions', '-Wno-unused-parameter'],
      'cflags_cc!': ['-fno-exceptions', '-fno-rtti', '-std=gnu++17'],
      'cflags': ['-Wall', '-Wextra', '-O2'],
      'cflags_cc': ['-std=c++17', '-fexceptions', '-Wall', '-Wextra', '-O2'],
    },
  ],
}
