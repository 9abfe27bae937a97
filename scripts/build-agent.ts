// `npm run build:agent`: the agent as one self-contained JavaScript file, dist/deckhand-agent.js,
// which a plain Node 22+ runs (`node deckhand-agent.js --url … --token …`) with nothing installed
// beside it. The coordinator serves it to installers and agents (GET /agent/download) and builds
// it on demand when it is missing. Bundled with rolldown (TypeScript, ESM, node platform). The
// agent reads its version from its package.json at run time; in the bundle that read is replaced
// by the version itself, since no package.json travels with it.
import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const AGENT_BUNDLE = path.join(ROOT, 'dist', 'deckhand-agent.js');

/** What agent/src/main.ts does to learn its version; the build fails loudly if it changes. */
const VERSION_READ =
  /JSON\.parse\(\s*readFileSync\(new URL\('\.\.\/package\.json', import\.meta\.url\), 'utf8'\),?\s*\)/;

export interface BuiltAgent {
  file: string;
  version: string;
  sha256: string;
  bytes: number;
}

export async function buildAgentBundle(outFile = AGENT_BUNDLE): Promise<BuiltAgent> {
  const { rolldown } = await import('rolldown');
  const pkg = JSON.parse(await readFile(path.join(ROOT, 'agent', 'package.json'), 'utf8')) as {
    version: string;
  };
  const mainFile = path.join(ROOT, 'agent', 'src', 'main.ts');
  let replaced = false;
  const bundle = await rolldown({
    input: mainFile,
    platform: 'node',
    // ws loads these native speed-ups only if they are installed; without them it works as well.
    external: ['bufferutil', 'utf-8-validate'],
    logLevel: 'warn',
    plugins: [
      {
        name: 'deckhand-agent-version',
        transform(code, id) {
          if (path.resolve(id) !== mainFile) return null;
          if (!VERSION_READ.test(code)) return null;
          replaced = true;
          return {
            code: code.replace(VERSION_READ, `(${JSON.stringify({ version: pkg.version })})`),
            map: null,
          };
        },
      },
    ],
  });
  try {
    const { output } = await bundle.generate({
      format: 'esm',
      codeSplitting: false,
      // (rolldown gives the CommonJS dependencies, pino and ws, a require() of their own.)
      banner: [
        '#!/usr/bin/env node',
        `// deckhand-agent ${pkg.version}: one file, run it with Node 22+. Built by scripts/build-agent.ts.`,
      ].join('\n'),
    });
    if (!replaced) {
      throw new Error(
        'agent/src/main.ts no longer reads its version as scripts/build-agent.ts expects: update VERSION_READ there',
      );
    }
    const chunks = output.filter((o) => o.type === 'chunk');
    if (chunks.length !== 1) throw new Error(`expected one bundled file, got ${chunks.length}`);
    const code = Buffer.from(chunks[0]!.code);
    await mkdir(path.dirname(outFile), { recursive: true });
    // Written beside and renamed: a coordinator serving the file never sends half of it.
    const tmp = `${outFile}.tmp-${process.pid}`;
    await writeFile(tmp, code, { mode: 0o755 });
    await rename(tmp, outFile);
    return {
      file: outFile,
      version: pkg.version,
      sha256: createHash('sha256').update(code).digest('hex'),
      bytes: code.length,
    };
  } finally {
    await bundle.close();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const built = await buildAgentBundle(process.argv[2] ? path.resolve(process.argv[2]) : AGENT_BUNDLE);
  console.log(
    `${path.relative(process.cwd(), built.file)}: deckhand-agent ${built.version}, ${Math.round(built.bytes / 1024)} KiB, sha256 ${built.sha256}`,
  );
}
