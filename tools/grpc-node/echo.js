'use strict';
// Loads echo.proto for the client and the server.
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const def = protoLoader.loadSync(path.join(__dirname, 'echo.proto'), { keepCase: true });
module.exports = grpc.loadPackageDefinition(def).vmesh.echo;
