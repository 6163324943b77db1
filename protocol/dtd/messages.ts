/**
 * DTD's own DHTTP messages (protocol/README.md, section DTD):
 *
 *   request field    DTD-Mode: proceed | proceed;auto=N | abort
 *   response field   DTD-Announce: held;length=N | sending;length=N   (on a body-less announcement)
 *   decision         ID | otherPort | flags | "DTD * HTTP/1.1" + Host + "DTD-Decision: proceed | dont-bother"
 *
 * The announcement is a DHTTP response on the request's ID: the real status line and headers (with
 * Repr-Digest), an empty body and `DTD-Announce`. The decision is a DHTTP request on the same ID with the
 * method DTD (so a server that knows nothing of DTD answers 501, never runs it as a GET).
 */
import { getHeaders, serializeRequest, type HttpHeaders, type HttpRequest } from '../dhttp/http1';
import { dtdError } from './errors';
import { parseItem } from './structured-fields';

export const DTD_METHOD = 'DTD';
export const DTD_MODE_FIELD = 'DTD-Mode';
export const DTD_ANNOUNCE_FIELD = 'DTD-Announce';
export const DTD_DECISION_FIELD = 'DTD-Decision';

export type WireMode = { mode: 'proceed'; autoBelowBytes: number } | { mode: 'abort' };
export type Decision = 'proceed' | 'dont-bother';

export interface Announcement {
  /** true: the server holds the body until the decision; false: the body follows at once. */
  held: boolean;
  /** Length of the body announced. */
  length: number;
}

const MAX_LENGTH = 2 ** 53 - 1;

export function formatDtdMode(m: WireMode): string {
  if (m.mode === 'abort') return 'abort';
  if (!Number.isInteger(m.autoBelowBytes) || m.autoBelowBytes < 0 || m.autoBelowBytes > 999_999_999_999_999) {
    throw dtdError('DTD_ERR_BAD_MODE', `auto threshold ${m.autoBelowBytes}`);
  }
  return m.autoBelowBytes === 0 ? 'proceed' : `proceed;auto=${m.autoBelowBytes}`;
}

/** Reads the request's DTD-Mode field: null when absent; throws DTD_ERR_BAD_MODE when unreadable or repeated. */
export function parseDtdMode(headers: HttpHeaders): WireMode | null {
  const values = getHeaders(headers, 'dtd-mode');
  if (values.length === 0) return null;
  if (values.length > 1) throw dtdError('DTD_ERR_BAD_MODE', 'DTD-Mode appears more than once');
  let parsed;
  try {
    parsed = parseItem(values[0]);
  } catch (e) {
    throw dtdError('DTD_ERR_BAD_MODE', `DTD-Mode: ${(e as Error).message}`);
  }
  const { item, params } = parsed;
  if (item.type !== 'token') throw dtdError('DTD_ERR_BAD_MODE', 'DTD-Mode is a token');
  if (item.value === 'abort') {
    if (params.size > 0) throw dtdError('DTD_ERR_BAD_MODE', 'abort takes no parameters');
    return { mode: 'abort' };
  }
  if (item.value !== 'proceed') throw dtdError('DTD_ERR_BAD_MODE', `unknown DTD-Mode ${JSON.stringify(item.value.slice(0, 20))}`);
  let auto = 0;
  for (const [k, v] of params) {
    if (k !== 'auto' || v.type !== 'integer' || v.value < 0) throw dtdError('DTD_ERR_BAD_MODE', `bad DTD-Mode parameter ${k}`);
    auto = v.value;
  }
  return { mode: 'proceed', autoBelowBytes: auto };
}

export function formatAnnounce(a: Announcement): string {
  if (!Number.isInteger(a.length) || a.length < 0 || a.length > MAX_LENGTH) throw dtdError('DTD_ERR_BAD_ANNOUNCE', `length ${a.length}`);
  return `${a.held ? 'held' : 'sending'};length=${a.length}`;
}

/** Reads a response's DTD-Announce field: null when absent; throws DTD_ERR_BAD_ANNOUNCE when unreadable. */
export function parseAnnounce(headers: HttpHeaders): Announcement | null {
  const values = getHeaders(headers, 'dtd-announce');
  if (values.length === 0) return null;
  if (values.length > 1) throw dtdError('DTD_ERR_BAD_ANNOUNCE', 'DTD-Announce appears more than once');
  let parsed;
  try {
    parsed = parseItem(values[0]);
  } catch (e) {
    throw dtdError('DTD_ERR_BAD_ANNOUNCE', `DTD-Announce: ${(e as Error).message}`);
  }
  const { item, params } = parsed;
  if (item.type !== 'token' || (item.value !== 'held' && item.value !== 'sending')) {
    throw dtdError('DTD_ERR_BAD_ANNOUNCE', 'DTD-Announce is held or sending');
  }
  const len = params.get('length');
  if (len === undefined || len.type !== 'integer' || len.value < 0) throw dtdError('DTD_ERR_BAD_ANNOUNCE', 'DTD-Announce needs length=N');
  return { held: item.value === 'held', length: len.value };
}

/** The HTTP part of a decision message (wrap it with encodeRequest on the request's ID). */
/** `extra`: further fields (the client's address token, which proves its address for the body a PROCEED asks for). */
export function encodeDecision(host: string, decision: Decision, extra: [string, string][] = []): Uint8Array {
  return serializeRequest({
    method: DTD_METHOD,
    target: '*',
    headers: [
      ['Host', host],
      [DTD_DECISION_FIELD, decision],
      ...extra,
    ],
    body: new Uint8Array(0),
  });
}

export function isDecisionRequest(req: Pick<HttpRequest, 'method'>): boolean {
  return req.method === DTD_METHOD;
}

/** Validates a parsed DTD request. Throws DTD_ERR_BAD_DECISION on anything but one known decision. */
export function parseDecision(req: HttpRequest): Decision {
  if (req.method !== DTD_METHOD) throw dtdError('DTD_ERR_BAD_DECISION', `method ${req.method} is not ${DTD_METHOD}`);
  if (req.target !== '*') throw dtdError('DTD_ERR_BAD_DECISION', 'a decision targets *');
  if (req.body.length > 0) throw dtdError('DTD_ERR_BAD_DECISION', 'a decision has no body');
  const values = getHeaders(req.headers, 'dtd-decision');
  if (values.length !== 1) throw dtdError('DTD_ERR_BAD_DECISION', `${values.length} DTD-Decision fields`);
  const v = values[0].trim().toLowerCase();
  if (v !== 'proceed' && v !== 'dont-bother') throw dtdError('DTD_ERR_BAD_DECISION', `unknown decision ${JSON.stringify(v.slice(0, 20))}`);
  return v;
}
