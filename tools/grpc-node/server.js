'use strict';
// An xDS-enabled grpc-node server (grpc-js-xds XdsServer) answering
// vmesh.echo.Echo with its id. The bootstrap comes from GRPC_XDS_BOOTSTRAP.
//
//   node server.js ID HOST:PORT [fail]
//
// It prints one JSON line per serving state change: {"serving":true} once
// vmesh's inbound listener for HOST:PORT is accepted, {"serving":false,
// "details":"..."} when it is not. Request metadata steers each answer:
// fail-once: TOKEN fails the first call carrying TOKEN with UNAVAILABLE,
// on whichever server of those sharing the folder FAIL_ONCE_DIR it lands
// (the token's file there is created once); sleep-ms: N answers after N
// milliseconds. With "fail" every
// call fails with UNAVAILABLE.
const fs = require('fs');
const path = require('path');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');
const echo = require('./echo');

// register() also registers the HTTP filters (router, fault, RBAC) that
// the server's listener names: without it every listener is rejected.
xds.register();
const [id, addr, mode] = process.argv.slice(2);

// firstSight reports whether no server sharing FAIL_ONCE_DIR has seen token.
function firstSight(token) {
  try {
    fs.closeSync(fs.openSync(path.join(process.env.FAIL_ONCE_DIR, encodeURIComponent(token)), 'wx'));
    return true;
  } catch (e) {
    return false;
  }
}

function answer(call, callback) {
  const md = call.metadata;
  if (mode === 'fail') {
    callback({ code: grpc.status.UNAVAILABLE, details: id + ' always fails' });
    return;
  }
  const token = md.get('fail-once')[0];
  if (token !== undefined && firstSight(String(token))) {
    callback({ code: grpc.status.UNAVAILABLE, details: 'transient failure' });
    return;
  }
  const sleep = Number(md.get('sleep-ms')[0] || 0);
  setTimeout(() => callback(null, { server_id: id }), sleep);
}

const server = new xds.XdsServer();
server.addService(echo.Echo.service, { Call: answer, Call2: answer });
// The callback runs once the port serves (vmesh's listener accepted);
// the state listener, which exists once the port is bound, reports the rest.
server.bindAsync(addr, grpc.ServerCredentials.createInsecure(), (err) => {
  if (err) {
    process.stdout.write(JSON.stringify({ error: String(err) }) + '\n');
    process.exit(1);
  }
  process.stdout.write(JSON.stringify({ serving: true }) + '\n');
});
server.addServingStateListener(addr, (st) => {
  if (st.code !== grpc.status.OK) {
    process.stdout.write(JSON.stringify({ serving: false, details: st.details }) + '\n');
  }
});
process.on('SIGTERM', () => server.forceShutdown());
