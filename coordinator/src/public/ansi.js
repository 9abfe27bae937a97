// ANSI terminal output → HTML, for deployment logs (the server renders stored output with it, and
// the deployment page's script renders live output with the same code). Log output is untrusted:
// every character is escaped, and colours become class names (ansi-fg-N, ansi-bg-N, N < 256),
// never inline styles, so the page's Content-Security-Policy needs no exception. SGR colours and
// bold/dim/italic/underline are kept; every other escape sequence (cursor moves, erase, OSC
// titles and links) is dropped. A lone carriage return starts a new line, so progress bars stay
// readable. The renderer is stateful: colours and an escape sequence split between two chunks
// carry over to the next push().

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const ESCAPE_RE = /[&<>"']/g;

/** HTML-escapes text. */
export function escapeHtml(text) {
  return text.replace(ESCAPE_RE, (c) => ESCAPES[c]);
}

/** The xterm 256-colour index nearest to an RGB colour (the 6×6×6 cube or the grey ramp). */
export function nearest256(r, g, b) {
  const level = (v) => (v < 48 ? 0 : v < 115 ? 1 : Math.min(5, Math.floor((v - 35) / 40)));
  const cube = [r, g, b].map(level);
  const steps = [0, 95, 135, 175, 215, 255];
  const cubeDist = cube.reduce((d, l, i) => d + (steps[l] - [r, g, b][i]) ** 2, 0);
  const grey = Math.max(0, Math.min(23, Math.round(((r + g + b) / 3 - 8) / 10)));
  const gv = 8 + grey * 10;
  const greyDist = (gv - r) ** 2 + (gv - g) ** 2 + (gv - b) ** 2;
  return greyDist < cubeDist ? 232 + grey : 16 + 36 * cube[0] + 6 * cube[1] + cube[2];
}

/** The RGB value of an xterm 256-colour index from 16 on (for the generated stylesheet). */
export function rgbOf256(n) {
  if (n >= 232) {
    const v = 8 + (n - 232) * 10;
    return [v, v, v];
  }
  const steps = [0, 95, 135, 175, 215, 255];
  const i = n - 16;
  return [steps[Math.floor(i / 36)], steps[Math.floor(i / 6) % 6], steps[i % 6]];
}

// Everything that is not plain text: escape sequences, C0 controls other than \t and \n, DEL.
// eslint-disable-next-line no-control-regex
const SPECIAL = /[\x00-\x08\x0b-\x1f\x7f]/g;
const MAX_PENDING = 256;

export class AnsiRenderer {
  constructor(state) {
    this.fg = state?.fg ?? null;
    this.bg = state?.bg ?? null;
    this.bold = state?.bold ?? false;
    this.dim = state?.dim ?? false;
    this.italic = state?.italic ?? false;
    this.underline = state?.underline ?? false;
    this.inverse = state?.inverse ?? false;
    /** An escape sequence (or a \r) cut at the end of the last chunk. */
    this.pending = state?.pending ?? '';
  }

  /** What carries over to the next chunk (to continue rendering elsewhere). */
  state() {
    const { fg, bg, bold, dim, italic, underline, inverse, pending } = this;
    return { fg, bg, bold, dim, italic, underline, inverse, pending };
  }

  #classes() {
    const c = [];
    let fg = this.fg;
    let bg = this.bg;
    if (this.inverse) [fg, bg] = [bg ?? 7, fg ?? 0];
    if (fg !== null) c.push(`ansi-fg-${fg}`);
    if (bg !== null) c.push(`ansi-bg-${bg}`);
    if (this.bold) c.push('ansi-bold');
    if (this.dim) c.push('ansi-dim');
    if (this.italic) c.push('ansi-italic');
    if (this.underline) c.push('ansi-underline');
    return c.join(' ');
  }

  #text(out, text) {
    if (text === '') return;
    const cls = this.#classes();
    out.push(cls ? `<span class="${cls}">${escapeHtml(text)}</span>` : escapeHtml(text));
  }

  #sgr(params) {
    const codes = params === '' ? [0] : params.split(/[;:]/).map((p) => (p === '' ? 0 : Number(p)));
    for (let i = 0; i < codes.length; i++) {
      const n = codes[i];
      if (n === 0) {
        this.fg = this.bg = null;
        this.bold = this.dim = this.italic = this.underline = this.inverse = false;
      } else if (n === 1) this.bold = true;
      else if (n === 2) this.dim = true;
      else if (n === 3) this.italic = true;
      else if (n === 4) this.underline = true;
      else if (n === 7) this.inverse = true;
      else if (n === 22) this.bold = this.dim = false;
      else if (n === 23) this.italic = false;
      else if (n === 24) this.underline = false;
      else if (n === 27) this.inverse = false;
      else if (n >= 30 && n <= 37) this.fg = n - 30;
      else if (n === 39) this.fg = null;
      else if (n >= 40 && n <= 47) this.bg = n - 40;
      else if (n === 49) this.bg = null;
      else if (n >= 90 && n <= 97) this.fg = n - 90 + 8;
      else if (n >= 100 && n <= 107) this.bg = n - 100 + 8;
      else if (n === 38 || n === 48) {
        let colour;
        if (codes[i + 1] === 5 && i + 2 < codes.length) {
          colour = codes[i + 2];
          i += 2;
        } else if (codes[i + 1] === 2 && i + 4 < codes.length) {
          colour = nearest256(codes[i + 2], codes[i + 3], codes[i + 4]);
          i += 4;
        } else break;
        if (!Number.isInteger(colour) || colour < 0 || colour > 255) continue;
        if (n === 38) this.fg = colour;
        else this.bg = colour;
      }
    }
  }

  /** Renders the next chunk of output; returns HTML (escaped text in spans). */
  push(chunk) {
    const text = this.pending + chunk;
    this.pending = '';
    const out = [];
    let at = 0;
    while (at < text.length) {
      SPECIAL.lastIndex = at;
      const m = SPECIAL.exec(text);
      if (!m) {
        this.#text(out, text.slice(at));
        break;
      }
      this.#text(out, text.slice(at, m.index));
      at = m.index;
      const c = text[at];
      if (c === '\r') {
        if (at + 1 >= text.length) {
          this.pending = '\r';
          break;
        }
        if (text[at + 1] !== '\n') out.push('\n');
        at += 1;
        continue;
      }
      if (c !== '\x1b') {
        at += 1; // other control characters: dropped
        continue;
      }
      const seq = this.#sequence(text, at);
      if (seq === null) {
        // Cut off: keep it for the next chunk, unless it is too long to be a real sequence.
        if (text.length - at <= MAX_PENDING) this.pending = text.slice(at);
        break;
      }
      if (seq.sgr !== undefined) this.#sgr(seq.sgr);
      at = seq.end;
    }
    return out.join('');
  }

  /** The escape sequence at `at`: where it ends and its SGR parameters, or null when incomplete. */
  #sequence(text, at) {
    const kind = text[at + 1];
    if (kind === undefined) return null;
    if (kind === '[') {
      for (let i = at + 2; i < text.length; i++) {
        const code = text.charCodeAt(i);
        if (code >= 0x40 && code <= 0x7e) {
          const params = text.slice(at + 2, i);
          return text[i] === 'm' && /^[\d;:]*$/.test(params) ? { end: i + 1, sgr: params } : { end: i + 1 };
        }
        if (code < 0x20 || code > 0x3f) return { end: i }; // malformed: drop what was read
      }
      return null;
    }
    if (kind === ']' || kind === 'P' || kind === '_' || kind === '^') {
      // OSC / DCS / APC / PM: up to BEL or ESC \
      for (let i = at + 2; i < text.length; i++) {
        if (text[i] === '\x07') return { end: i + 1 };
        if (text[i] === '\x1b') {
          if (i + 1 >= text.length) return null;
          return { end: text[i + 1] === '\\' ? i + 2 : i };
        }
      }
      return null;
    }
    return { end: at + 2 };
  }
}

/** Renders a whole text at once. */
export function ansiToHtml(text) {
  return new AnsiRenderer().push(text);
}
