// Request validation with two Ajv instances: query strings and route params arrive as text, so
// their types are coerced ("20" → 20); JSON bodies are taken as sent — coercion there would turn
// `null` into "" (deleting nothing) or `[id]` into `id`. An unknown field where a schema closes
// its object (a typo in a nested setting) is refused rather than silently dropped.
import { Ajv, type Options } from 'ajv';
import addFormatsModule from 'ajv-formats';
import type { FastifyInstance } from 'fastify';

// ajv-formats is CommonJS with its function on `default`.
const addFormats = addFormatsModule as unknown as (ajv: Ajv) => Ajv;

function makeAjv(coerceTypes: Options['coerceTypes'], removeAdditional: Options['removeAdditional']): Ajv {
  const ajv = new Ajv({
    coerceTypes,
    useDefaults: true,
    removeAdditional,
    addUsedSchema: false,
    allErrors: false,
    strict: false,
  });
  addFormats(ajv);
  return ajv;
}

export function installValidators(app: FastifyInstance): void {
  const body = makeAjv(false, false);
  const text = makeAjv('array', 'all');
  app.setValidatorCompiler(({ schema, httpPart }) => (httpPart === 'body' ? body : text).compile(schema));
}
