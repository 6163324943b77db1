// Which commit a benchmark measured: every bench writes it into its JSON, so a figure can be traced to its code.
import { execFileSync } from 'node:child_process';

/**
 * The commit checked out where dist/ was built, as git names it (a linked worktree's `.git` is a file, and a
 * branch's ref may be packed: reading `.git/HEAD` by hand recorded null or a branch name there). Null without git or
 * a repository. `dir`: any directory inside the checkout (git finds its root). Read it when the bench starts: the
 * checkout may move while a long bench runs.
 */
export function gitCommit(dir: string = __dirname): string | null {
  try {
    const out = execFileSync('git', ['rev-parse', 'HEAD'], { cwd: dir, encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 5000 }).trim();
    return /^[0-9a-f]{40}$/.test(out) ? out : null;
  } catch {
    return null;
  }
}
