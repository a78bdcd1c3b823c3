// A real cronshard stack for the browser tests, on loopback: the built
// cronshard-api (auth on, a random token), one cronshard-scheduler and one
// cronshard-worker, on a database, Redis key prefix and queue names of
// their own, with a random key-encryption key (SECRETS_KEK: signing keys,
// completion tokens, alert channel addresses), alert rules evaluated every
// second, plus a loopback HTTP receiver (/ok answers 200, /fail 500,
// /accept 202 with a request id, anything else 200: alert notices).
// Everything is removed again by stop(): processes (SIGTERM, then SIGKILL),
// the database, the Redis keys and the RabbitMQ queues of this run.

import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import { once } from 'node:events';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const PG_ADMIN = process.env.UI_TEST_PG_ADMIN_URL || 'postgres://postgres@127.0.0.1:5432/postgres';
const REDIS_HOST = process.env.UI_TEST_REDIS_HOST || '127.0.0.1';

export function binDir() {
  const target = process.env.CARGO_TARGET_DIR || path.join(ROOT, 'target');
  return path.join(path.isAbsolute(target) ? target : path.join(ROOT, target), 'debug');
}

async function freePort() {
  const srv = net.createServer();
  srv.listen(0, '127.0.0.1');
  await once(srv, 'listening');
  const { port } = srv.address();
  srv.close();
  await once(srv, 'close');
  return port;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `fn` until it returns a truthy value; fails after `ms` with `what`. */
export async function until(what, fn, ms = 30_000, every = 250) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      const v = await fn();
      if (v) return v;
    } catch (e) {
      last = e;
    }
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await sleep(every);
  }
}

/**
 * The receiver: counts calls per path and keeps the last request's headers
 * per path; /ok → 200, /fail → 500, /accept → 202 (it takes the work and
 * reports later: an async-completion job), with an `x-request-id`.
 */
async function startReceiver() {
  const hits = new Map();
  const last = new Map();
  const server = createServer((req, res) => {
    const p = new URL(req.url, 'http://x').pathname;
    const n = (hits.get(p) || 0) + 1;
    hits.set(p, n);
    last.set(p, req.headers);
    req.resume();
    req.on('end', () => {
      if (p.startsWith('/fail')) {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('receiver says no');
      } else if (p.startsWith('/accept')) {
        res.writeHead(202, { 'content-type': 'application/json', 'x-request-id': `accept-${n}` });
        res.end('{"queued":true}');
      } else {
        res.writeHead(200, { 'content-type': 'text/plain' });
        res.end('ok');
      }
    });
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, url: `http://127.0.0.1:${server.address().port}`, hits, last };
}

export async function startStack(runDir) {
  const bin = binDir();
  for (const b of ['cronshard-api', 'cronshard-scheduler', 'cronshard-worker']) {
    if (!existsSync(path.join(bin, b))) throw new Error(`${path.join(bin, b)} is missing: run cargo build --workspace --bins`);
  }
  mkdirSync(runDir, { recursive: true });
  const suffix = randomBytes(6).toString('hex');
  const db = `cronshard_ui_${suffix}`;
  const cluster = `ui-${suffix}`;
  const token = randomBytes(24).toString('base64url');
  // The API seals signing keys and the worker makes completion tokens with it.
  const kek = `ui-${suffix}:${randomBytes(32).toString('base64')}`;
  const apiPort = await freePort();
  const env = {
    ...process.env,
    DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${db}`,
    CLUSTER_NAME: cluster,
    REDIS_URLS: process.env.UI_TEST_REDIS_URL || 'redis://127.0.0.1:6379',
    AMQP_URL: process.env.UI_TEST_AMQP_URL || 'amqp://guest:guest@127.0.0.1:5672/%2f',
    CALLBACK_ALLOW_CIDRS: '127.0.0.0/8',
    RUST_LOG: process.env.UI_TEST_RUST_LOG || 'info',
    LOG_FORMAT: 'text',
    SECRETS_KEK: kek,
  };
  const children = [];
  const stack = {
    runDir,
    db,
    cluster,
    token,
    api: `http://127.0.0.1:${apiPort}`,
    receiver: null,
    children,
    async call(method, p, body) {
      const res = await fetch(`${stack.api}${p}`, {
        method,
        headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await res.text();
      return { status: res.status, body: text ? JSON.parse(text) : null };
    },
    stop: () => stop(stack),
  };

  const run = (name, args, extra) => {
    const log = createWriteStream(path.join(runDir, `${name}.log`));
    const child = spawn(path.join(bin, args[0]), args.slice(1), { env: { ...env, ...extra }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.pipe(log);
    child.stderr.pipe(log);
    child.name = name;
    children.push(child);
    return child;
  };

  try {
    // The database: created and migrated by the API binary itself.
    const migrate = run('migrate', ['cronshard-api', 'migrate'], {});
    const [code] = await once(migrate, 'exit');
    if (code !== 0) throw new Error(`cronshard-api migrate exited ${code}; see ${runDir}/migrate.log`);
    children.splice(children.indexOf(migrate), 1);

    stack.receiver = await startReceiver();
    run('api', ['cronshard-api'], { LISTEN_ADDR: `127.0.0.1:${apiPort}`, API_TOKENS: token });
    run('scheduler', ['cronshard-scheduler'], {
      NODE_ID: 'ui-node-0',
      METRICS_ADDR: `127.0.0.1:${await freePort()}`,
      HEARTBEAT_INTERVAL_MS: '1000',
      POLL_INTERVAL_MS: '1000',
      // Alert rules evaluated every second: an incident opens within seconds of its slot.
      ALERT_EVALUATION_INTERVAL_MS: '1000',
    });
    // The failing job must not open the receiver's circuit for the good one.
    run('worker', ['cronshard-worker'], {
      WORKER_ID: 'ui-worker-0',
      METRICS_ADDR: `127.0.0.1:${await freePort()}`,
      WORKER_CIRCUIT_MIN_CALLS: '0',
    });
    const alive = () => {
      for (const c of children) if (c.exitCode !== null) throw new Error(`${c.name} exited (${c.exitCode}); see ${runDir}/${c.name}.log`);
    };
    await until('the API to be ready', async () => {
      alive();
      const r = await fetch(`${stack.api}/readyz`);
      return r.ok;
    });
    await until('the scheduler node to join', async () => {
      alive();
      const r = await stack.call('GET', '/v1/cluster');
      return r.status === 200 && r.body.live_nodes >= 1;
    });
    return stack;
  } catch (e) {
    await stop(stack);
    throw e;
  }
}

async function stop(stack) {
  for (const c of stack.children) if (c.exitCode === null) c.kill('SIGTERM');
  await Promise.all(
    stack.children.map(async (c) => {
      if (c.exitCode !== null) return;
      const t = setTimeout(() => c.kill('SIGKILL'), 15_000);
      await once(c, 'exit');
      clearTimeout(t);
    }),
  );
  stack.children.length = 0;
  if (stack.receiver) {
    stack.receiver.server.closeAllConnections?.();
    stack.receiver.server.close();
  }
  const quiet = { stdio: 'ignore', timeout: 30_000 };
  try {
    execFileSync('psql', ['-q', PG_ADMIN, '-c', `DROP DATABASE IF EXISTS ${stack.db} WITH (FORCE)`], quiet);
  } catch {
    /* best effort: a leftover test database is only disk */
  }
  try {
    const keys = execFileSync('redis-cli', ['-h', REDIS_HOST, '--scan', '--pattern', `${stack.cluster}:*`], { timeout: 30_000 })
      .toString()
      .split('\n')
      .filter(Boolean);
    for (let i = 0; i < keys.length; i += 100) execFileSync('redis-cli', ['-h', REDIS_HOST, 'del', ...keys.slice(i, i + 100)], quiet);
  } catch {
    /* best effort */
  }
  try {
    const queues = execFileSync('rabbitmqctl', ['-q', 'list_queues', 'name'], { timeout: 60_000 })
      .toString()
      .split('\n')
      .map((l) => l.trim())
      .filter((q) => q.startsWith(`${stack.cluster}.`));
    for (const q of queues) execFileSync('rabbitmqctl', ['-q', 'delete_queue', q], quiet);
  } catch {
    /* best effort: rabbitmqctl may need privileges this user lacks */
  }
}
