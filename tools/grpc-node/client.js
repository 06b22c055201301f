'use strict';
// A grpc-node xDS client (grpc-js-xds) driven over stdin: one JSON command
// a line, one JSON answer a line. The bootstrap comes from
// GRPC_XDS_BOOTSTRAP.
//
//   {"target":"xds:///echo.mesh.internal:7070","n":30,"method":"Call",
//    "md":{"x-canary":"true"},"parallel":1,"staggerMs":0,"deadlineMs":5000}
//   -> {"counts":{"b1":14,"b2":16}}
//
// counts are by answering server id, or by status code name for a failed
// call. "parallel" calls run at once, the k-th of them starting k*staggerMs
// after the first (grpc-js counts a call against a circuit breaker only once
// it has started, after its pick: calls picked in the same tick all pass). "md" values may contain {i}, replaced by the call's number (a token
// per call). One channel per target, kept for the process's life.
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');
const readline = require('readline');
const echo = require('./echo');

xds.register();
const clients = new Map();
const codeNames = Object.fromEntries(Object.entries(grpc.status).map(([k, v]) => [v, k]));

function client(target) {
  if (!clients.has(target)) {
    clients.set(target, new echo.Echo(target, grpc.credentials.createInsecure()));
  }
  return clients.get(target);
}

function one(c, cmd, i) {
  const md = new grpc.Metadata();
  for (const [k, v] of Object.entries(cmd.md || {})) {
    md.set(k, String(v).replace('{i}', String(i)));
  }
  const deadline = new Date(Date.now() + (cmd.deadlineMs || 5000));
  return new Promise((resolve) => {
    c[cmd.method || 'Call']({}, md, { deadline }, (err, reply) => {
      resolve(err ? codeNames[err.code] || String(err.code) : reply.server_id);
    });
  });
}

async function run(cmd) {
  const c = client(cmd.target);
  const counts = {};
  const parallel = Math.max(1, cmd.parallel || 1);
  let next = 0;
  async function worker(k) {
    await new Promise((resolve) => setTimeout(resolve, k * (cmd.staggerMs || 0)));
    while (next < cmd.n) {
      const i = next++;
      const k = await one(c, cmd, i);
      counts[k] = (counts[k] || 0) + 1;
    }
  }
  await Promise.all(Array.from({ length: parallel }, (_, k) => worker(k)));
  return { counts };
}

// Commands run one after the other, in order.
let queue = Promise.resolve();
readline.createInterface({ input: process.stdin }).on('line', (line) => {
  queue = queue.then(async () => {
    let out;
    try {
      out = await run(JSON.parse(line));
    } catch (e) {
      out = { error: String(e) };
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  });
}).on('close', () => queue.then(() => process.exit(0)));
