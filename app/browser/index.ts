// The browser host (shell-independent) and the Chromium-window / headless shells' host side.
export * from '../../protocol/browser/api';
export { BrowserService, type BrowserServiceOptions } from './service';
export { startShellServer, type ShellServer } from './shell-server';
export { viewUrlFor, VIEW_CSP } from './frame-origin';
export { startBrowserSession, defaultRendererDir, type BrowserSession, type BrowserSessionOptions } from './session';
export { openAppWindow, openHeadless, type AppWindow, chromiumFlags, onlyToFlags, chromiumAvailable, findChromium, hasDisplay, BROWSER_NAMES, CHROMIUM_PATH, BrowserUnavailableError, NoDisplayError } from './chromium';
export { startLossyRelay, type LossyRelay } from './lossy-relay';
export { httpStream, StreamingResponseDecoder, HttpStreamError } from './http-stream';
export { dumpToParse5, serializeDump } from './wire';
export { DomOpRecorder } from './dom-recorder';
