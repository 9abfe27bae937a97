// The sign-in page the redirect to /login?next=... leads to: `next` only ever sends the user back
// into the coordinator, and it can never inject markup or script into the page.
import { describe, expect, it } from 'vitest';
import { coordinatorFor } from '../helpers/coordinator.ts';

describe('the sign-in page after the redirect: /login?next=...', () => {
  const coord = coordinatorFor();

  /** Where the page's script sends the browser after signing in, resolved as a browser would. */
  async function redirectTarget(page: 'login' | 'register', next: string): Promise<URL> {
    const res = await fetch(`${coord.current.url}/${page}?next=${encodeURIComponent(next)}`, {
      headers: { accept: 'text/html' },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/html/);
    const html = await res.text();
    // The form carries the target in an (HTML-escaped) data attribute the script navigates to.
    const match = /data-next="([^"]*)"/.exec(html);
    expect(match, 'the sign-in form names where to go after signing in').not.toBeNull();
    const unescaped = match![1]!
      .replace(/&lt;/g, '<')
      .replace(/&gt;/g, '>')
      .replace(/&quot;/g, '"')
      .replace(/&#39;/g, "'")
      .replace(/&amp;/g, '&');
    return new URL(unescaped, coord.current.url);
  }

  it('a path on the coordinator is kept', async () => {
    const target = await redirectTarget('login', '/deploy/abc?x=1');
    expect(target.href).toBe(`${coord.current.url}/deploy/abc?x=1`);
  });

  for (const next of [
    'https://evil.example/',
    '//evil.example/',
    '/\\evil.example/',
    '/\t/evil.example/',
    '/\n/evil.example/',
    '\\\\evil.example/',
  ]) {
    it(`next=${JSON.stringify(next)} cannot send the user to another origin`, async () => {
      for (const page of ['login', 'register'] as const) {
        const target = await redirectTarget(page, next);
        expect(target.origin, `${page}: ${target.href}`).toBe(new URL(coord.current.url).origin);
      }
    });
  }

  it('next cannot break out of the script: no markup from the query string reaches the page', async () => {
    const payload = '/</script><script>window.pwned=1</script>';
    const scriptEnds = (html: string) => html.match(/<\/script/gi)?.length ?? 0;
    for (const page of ['login', 'register'] as const) {
      const plain = await (await fetch(`${coord.current.url}/${page}?next=%2F`)).text();
      const res = await fetch(`${coord.current.url}/${page}?next=${encodeURIComponent(payload)}`, {
        headers: { accept: 'text/html' },
      });
      expect(res.status).toBe(200);
      const html = await res.text();
      expect(html, page).not.toContain('<script>window.pwned=1</script>');
      // The page's own script tags only, whatever next held.
      expect(scriptEnds(html), page).toBe(scriptEnds(plain));
    }
  });

  it('next cannot open an HTML comment or a nested script either', async () => {
    const res = await fetch(`${coord.current.url}/login?next=${encodeURIComponent('/<!--<script>')}`, {
      headers: { accept: 'text/html' },
    });
    const html = await res.text();
    expect(html).not.toContain('<!--<script>');
  });
});
