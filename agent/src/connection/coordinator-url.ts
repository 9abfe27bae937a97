// Where the agent connects: the coordinator's base URL (any path prefix kept, e.g. behind a
// proxy at /deckhand) with http(s) turned into ws(s) and `/agent/ws` appended.

export const AGENT_SOCKET_PATH = '/agent/ws';

export function agentSocketUrl(base: URL): URL {
  const url = new URL(base.href);
  if (url.protocol === 'http:') url.protocol = 'ws:';
  else if (url.protocol === 'https:') url.protocol = 'wss:';
  const prefix = url.pathname.replace(/\/+$/, '');
  // A ws(s):// URL given in full already names the endpoint.
  url.pathname = prefix.endsWith(AGENT_SOCKET_PATH) ? prefix : `${prefix}${AGENT_SOCKET_PATH}`;
  url.search = '';
  url.hash = '';
  return url;
}
