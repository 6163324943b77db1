// The pure half of bench/congestion: reading `catp get -v`'s completion lines, and what the link's per-packet log
// says about two flows sharing the bottleneck (throughput over the overlap, shares, queueing delay).
import { analyseFairness, median, parseGetOutput, quantile, windowStats } from '../../bench/congestion/analysis';
import type { LogEvent } from '../../lab/link';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { gitCommit } from '../../bench/commit';

describe('bench/congestion analysis', () => {
  test('parses the completion lines of catp get -v', () => {
    const stream = '> GET dhttp://10.77.0.2:8080/p.html  request id ef24\n' +
      '< CATP page complete and verified: 32 frames (32 accepted, 0 refused or duplicate) in 4766.1 ms, first frame after 320.5 ms\n' +
      '  endpoint :: udp:1 tcp:2  x=1\n';
    expect(parseGetOutput(stream)).toEqual({ kind: 'stream', frames: 32, completionMs: 4766.1, firstFrameMs: 320.5 });
    const inorder = '< in-order page complete and verified: 36 frames (36 accepted, 0 refused or duplicate) in 5435.8 ms, first frame after - ms\n';
    expect(parseGetOutput(inorder)).toEqual({ kind: 'stream', frames: 36, completionMs: 5435.8 });
    const http = '< 200 OK  via plain HTTP/1.1 over TCP, 28227 bytes in 3089.0 ms, 0 resends\n';
    expect(parseGetOutput(http)).toEqual({ kind: 'http', status: 200, via: 'plain HTTP/1.1 over TCP', bodyBytes: 28227, completionMs: 3089 });
    expect(parseGetOutput('catp get: HOST_ERR_TIMEOUT\n')).toBeNull();
  });

  test('quantiles', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([4, 1, 2, 3])).toBe(2.5);
    expect(quantile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.95)).toBe(10);
    expect(Number.isNaN(median([]))).toBe(true);
  });

  test('splits two flows by protocol and port and measures them over their overlap', () => {
    // 100,000 B/s, 20 ms: TCP (sport 8081) sends 1000-byte packets every 10 ms from t=0 to t=4 s; UDP (sport 8080)
    // every 20 ms from t=1 s to t=3 s. Each packet waits 5 ms in the queue beyond its own 10 ms serialization.
    const rate = 100_000;
    const delayNs = 20_000_000n;
    const events: LogEvent[] = [];
    let idx = 0;
    const packet = (tMs: number, proto: number, sport: number) => {
      const a = BigInt(Math.round(tMs * 1e6));
      const base = { dir: 's2c' as const, idx: idx++, len: 1000, proto, src: '10.77.0.2', sport, dst: '10.77.0.1', dport: 40000, ipId: 0 };
      events.push({ ...base, tNs: a, ev: 'arrive' });
      events.push({ ...base, tNs: a + 5_000_000n + 10_000_000n + delayNs, ev: 'depart', lateNs: 0 });
    };
    for (let t = 0; t < 4000; t += 10) {
      packet(t, 6, 8081);
      if (t >= 1000 && t < 3000 && t % 20 === 0) packet(t, 17, 8080);
    }
    events.sort((a, b) => (a.tNs < b.tNs ? -1 : a.tNs > b.tNs ? 1 : 0));
    const f = analyseFairness(events, { tcpPort: 8081, udpPort: 8080, rate, delayNs });
    expect(f.overlap).not.toBeNull();
    expect(f.overlap!.ms).toBeCloseTo(1980, 0);
    expect(f.tcp.overlapBytesPerSec).toBeGreaterThan(99_000);
    expect(f.tcp.overlapBytesPerSec).toBeLessThan(101_500);
    // (both ends of the overlap are departures: 100 packets in 1.98 s)
    expect(Math.abs(f.udp.overlapBytesPerSec - 50_000)).toBeLessThan(1000);
    expect(f.udpOverTcp).toBeCloseTo(0.5, 1);
    expect(f.udp.shareOfEven).toBeCloseTo(1, 1);
    expect(f.queueDelay.medianMs).toBeCloseTo(5, 3);
    expect(f.queueDelayTcpAlone.medianMs).toBeCloseTo(5, 3);
    expect(f.tcpAloneBytesPerSec).toBeCloseTo(100_000, -3);
    const w = windowStats(events, 0n, 10_000_000_000n);
    expect(w.s2cPackets).toBe(400 + 100);
    expect(w.s2cDeliveredBytes).toBe(500 * 1000);
  });
});

describe('every bench records the commit it measured (bench/commit.ts)', () => {
  const git = (cwd: string, ...args: string[]) => execFileSync('git', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();

  test('in a repository, in a linked worktree of it (whose .git is a file) and with its refs packed; null outside one', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'catp-bench-git-'));
    try {
      const repo = path.join(dir, 'repo');
      fs.mkdirSync(repo);
      git(repo, 'init', '-q');
      fs.writeFileSync(path.join(repo, 'f'), 'x');
      git(repo, 'add', 'f');
      git(repo, '-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-qm', 'one');
      const head = git(repo, 'rev-parse', 'HEAD');
      expect(gitCommit(repo)).toBe(head);
      git(repo, 'worktree', 'add', '-q', '--detach', path.join(dir, 'wt'), 'HEAD');
      expect(fs.statSync(path.join(dir, 'wt', '.git')).isFile()).toBe(true);
      expect(gitCommit(path.join(dir, 'wt'))).toBe(head);
      git(repo, 'pack-refs', '--all');
      expect(gitCommit(repo)).toBe(head);
      const bare = path.join(dir, 'none');
      fs.mkdirSync(bare);
      expect(gitCommit(bare)).toBeNull();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
