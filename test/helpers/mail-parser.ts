// Reads what the test SMTP server received: headers, and the text and HTML parts of a MIME
// message (multipart, quoted-printable, base64), decoded to strings — enough to check a mail the
// way a mail client would show it.

export interface ParsedMail {
  headers: Record<string, string>;
  text: string | null;
  html: string | null;
}

function splitHeaders(raw: string): { headers: Record<string, string>; body: string } {
  const end = raw.search(/\r?\n\r?\n/);
  const head = end === -1 ? raw : raw.slice(0, end);
  const body = end === -1 ? '' : raw.slice(end).replace(/^\r?\n\r?\n/, '');
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\r?\n[ \t]+/g, ' ').split(/\r?\n/)) {
    const colon = line.indexOf(':');
    if (colon > 0) headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { headers, body };
}

function decodeBody(body: string, encoding: string | undefined): string {
  switch ((encoding ?? '7bit').toLowerCase()) {
    case 'base64':
      return Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8');
    case 'quoted-printable': {
      const text = body.replace(/=\r?\n/g, '').replace(/\r\n/g, '\n');
      const bytes: number[] = [];
      for (let i = 0; i < text.length; i++) {
        const hex = text[i] === '=' ? /^[0-9A-F]{2}/i.exec(text.slice(i + 1, i + 3)) : null;
        if (hex) {
          bytes.push(Number.parseInt(hex[0], 16));
          i += 2;
        } else {
          bytes.push(...Buffer.from(text[i]!, 'utf8'));
        }
      }
      return Buffer.from(bytes).toString('utf8');
    }
    default:
      return body.replace(/\r\n/g, '\n');
  }
}

function walk(raw: string, into: ParsedMail): void {
  const { headers, body } = splitHeaders(raw);
  const type = headers['content-type'] ?? 'text/plain';
  const boundary = /boundary="?([^";]+)"?/i.exec(type)?.[1];
  if (/^multipart\//i.test(type) && boundary) {
    const parts = body.split(`--${boundary}`).slice(1);
    for (const part of parts) {
      if (part.startsWith('--')) break;
      walk(part.replace(/^\r?\n/, ''), into);
    }
    return;
  }
  const decoded = decodeBody(body, headers['content-transfer-encoding']);
  if (/^text\/html/i.test(type)) into.html = decoded;
  else if (/^text\/plain/i.test(type)) into.text = decoded;
}

export function parseMail(raw: string): ParsedMail {
  const parsed: ParsedMail = { headers: splitHeaders(raw).headers, text: null, html: null };
  walk(raw, parsed);
  return parsed;
}
