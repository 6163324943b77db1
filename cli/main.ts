// `catp`: the project's command line. Each command lives in its own module under cli/commands.
import { UsageError, processIo, type Io } from './args';

type Command = (argv: string[], io: Io) => Promise<number>;

// Each command's module is loaded when it runs: the browser's and the lab's (playwright-core among them) took
// 100 ms of every `catp get` and `catp serve` before it did anything. (require, not import(): with Node16
// resolution a relative import() is an ES module import, which this CommonJS package and its tests do not run.)
// eslint-disable-next-line @typescript-eslint/no-require-imports
const load = <M>(path: string): M => require(path) as M;
type Serve = typeof import('./commands/serve');
type Get = typeof import('./commands/get');
type Browse = typeof import('./commands/browse');
type Link = typeof import('./commands/link');
type SilentTime = typeof import('./commands/silent-time');
type Demo = typeof import('./commands/demo');

const commands: Record<string, { run: Command; summary: string }> = {
  serve: { run: (a, io) => load<Serve>('./commands/serve').serve(a, io), summary: 'run the reference server (DHTTP over UDP and TCP, plain HTTP/1.1) on a directory' },
  get: { run: (a, io) => load<Get>('./commands/get').get(a, io), summary: 'fetch a dhttp://, dhttpt:// or http:// URL and write the body' },
  browse: { run: (a, io) => load<Browse>('./commands/browse').browse(a, io), summary: 'open the browser (a window, or --headless) on a URL or the bundled demo site' },
  link: { run: (a, io) => load<Link>('./commands/link').link(a, io), summary: 'run a command over an emulated link (delay, rate, loss) to a second network namespace' },
  'silent-time': { run: (a, io) => load<SilentTime>('./commands/silent-time').silentTime(a, io), summary: 'measure silent time of page loads per transport and loss through the emulated link' },
  demo: { run: (a, io) => load<Demo>('./commands/demo').demo(a, io), summary: 'the same page over CATP, in-order UDP and TCP side by side, through the same lossy link' },
};

/** Commands the project starts itself, not listed in the usage. */
const internal: Record<string, Command> = {
  '__demo-pane': (a) => load<Demo>('./commands/demo').demoPane(a),
};

function usage(): string {
  const width = Math.max(...Object.keys(commands).map((c) => c.length));
  return [
    'usage: catp <command> [options]',
    '',
    'commands:',
    ...Object.entries(commands).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`),
    '',
    "Run 'catp <command> --help' for a command's options.",
    '',
  ].join('\n');
}

export async function main(argv: string[], io: Io = processIo): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    (name === undefined ? io.stderr : io.stdout).write(usage());
    return name === undefined ? 2 : 0;
  }
  const command = commands[name] ?? (internal[name] ? { run: internal[name]!, summary: '' } : undefined);
  if (!command) {
    io.stderr.write(`catp: unknown command '${name}'\n\n${usage()}`);
    return 2;
  }
  try {
    return await command.run(rest, io);
  } catch (err) {
    if (err instanceof UsageError) {
      io.stderr.write(`catp ${name}: ${err.message}\nRun 'catp ${name} --help' for usage.\n`);
      return 2;
    }
    const code = (err as { code?: string }).code;
    const message = (err as Error).message ?? String(err);
    const tag = code && !message.includes(code) ? ` [${code}]` : '';
    io.stderr.write(`catp ${name}: ${message}${tag}\n`);
    return 1;
  }
}
