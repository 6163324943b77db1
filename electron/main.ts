// Electron main process: the same host as the Chromium-window shell (BrowserService + the shell server for the
// renderer and the page frame's sub-resources), with the API carried over Electron IPC instead of a WebSocket.
// The window runs the same renderer bundle with contextIsolation + sandbox, no nodeIntegration, and a preload
// that exposes only the API (electron/preload.ts).
import { join } from 'node:path';

import { app, BrowserWindow, ipcMain, session as electronSession, type IpcMainEvent } from 'electron';

import { IPC_COMMAND, IPC_EVENT, type Transport } from '../protocol/browser/api';
import { startBrowserSession } from '../app/browser/session';

async function main(): Promise<void> {
  const url = process.argv.slice(2).find((a) => /^[a-z]+:\/\//i.test(a));
  const transport = (process.env.CATP_TRANSPORT as Transport | undefined) ?? 'catp';
  const rate = process.env.CATP_RATE ? Number(process.env.CATP_RATE) : undefined;
  await app.whenReady();
  const browser = await startBrowserSession({
    shell: 'electron',
    // `catp browse` passes its --store / --no-store choice; started directly, the per-user store
    ...(process.env.CATP_NO_STORE === '1' ? { storeDir: null } : process.env.CATP_STORE_DIR ? { storeDir: process.env.CATP_STORE_DIR } : {}),
    defaultTransport: transport === 'inorder' ? 'inorder' : 'catp',
    ...(rate ? { rateBytesPerSec: rate } : {}),
  });
  // the page frame may only talk to our own server
  electronSession.defaultSession.setPermissionRequestHandler((_wc, _permission, cb) => cb(false));
  // and the window connects nowhere else: everything but the shell goes to the shell as a proxy, which refuses
  // (the Chromium shells' onlyToFlags, as a session setting)
  const shellHost = new URL(browser.shell.origin).host;
  const frameHost = new URL(browser.shell.frameOrigin).host;
  await electronSession.defaultSession.setProxy({ proxyRules: `http://${shellHost}`, proxyBypassRules: `<-loopback>;${shellHost};${frameHost}` });
  // the shell answers the https:// tunnels it carries with its own certificate (another origin's images, styles
  // and fonts; the host checks the real certificate): trusted for that certificate only, Chromium decides the rest
  const tunnelPem = browser.shell.tunnelCert.pem.trim();
  electronSession.defaultSession.setCertificateVerifyProc((request, callback) => callback(request.certificate.data.trim() === tunnelPem ? 0 : -3));
  const win = new BrowserWindow({
    width: 1280,
    height: 900,
    webPreferences: {
      preload: join(__dirname, 'preload.js'),
      contextIsolation: true,
      sandbox: true,
      nodeIntegration: false,
      webSecurity: true,
    },
  });
  const { handle, detach } = browser.service.attach((event) => {
    if (!win.isDestroyed()) win.webContents.send(IPC_EVENT, event);
  });
  const onCommand = (event: IpcMainEvent, command: unknown) => {
    if (event.sender !== win.webContents) return; // only our window
    handle(command);
  };
  ipcMain.on(IPC_COMMAND, onCommand);
  win.webContents.setWindowOpenHandler(() => ({ action: 'deny' }));
  win.webContents.on('will-navigate', (e, to) => {
    if (!to.startsWith(browser.shell.origin)) e.preventDefault();
  });
  // no secret needed in the URL: the API does not go over the WebSocket in this shell
  await win.loadURL(`${browser.shell.origin}/__catp/app.html`);
  await browser.service.whenReady();
  if (url) browser.service.navigate(url, transport);
  win.on('closed', () => {
    ipcMain.removeListener(IPC_COMMAND, onCommand);
    detach();
    void browser.close().then(() => app.quit());
  });
}

main().catch((err: Error) => {
  console.error(`catp electron: ${err.message}`);
  app.exit(1);
});
