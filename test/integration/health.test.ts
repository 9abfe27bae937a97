// Health and the OpenAPI document: public, no session needed, against a real coordinator over HTTP.
import { describe, expect, it } from 'vitest';
import { Client, coordinatorFor } from '../helpers/coordinator.ts';

const coord = coordinatorFor({ REGISTRATION: 'open' });

describe('Health and OpenAPI', () => {
  it('GET /healthz is 200 without a session', async () => {
    const res = await new Client(coord.current.url).get('/healthz');
    expect(res.status).toBe(200);
    expect(res.json.success).toBe(true);
  });

  it('GET /readyz is 200 {success: true, ...} without a session', async () => {
    const res = await new Client(coord.current.url).get('/readyz');
    expect(res.status).toBe(200);
    expect(res.json).toMatchObject({ success: true });
  });

  it('GET /openapi.json is an OpenAPI 3 document with the main paths', async () => {
    const res = await new Client(coord.current.url).get('/openapi.json');
    expect(res.status).toBe(200);
    expect(String(res.json.openapi)).toMatch(/^3\./);
    for (const path of ['/deploy', '/deploy/{id}', '/projects', '/webhook/{projectId}']) {
      expect(res.json.paths, path).toHaveProperty([path]);
    }
    expect(res.json.paths['/deploy']).toHaveProperty('post');
    expect(res.json.paths['/deploy/{id}']).toHaveProperty('get');
    expect(res.json.paths['/webhook/{projectId}']).toHaveProperty('post');
  });
});
