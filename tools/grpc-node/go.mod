// tools/grpc-node holds no Go code: this go.mod keeps the folder (and the
// node_modules that `npm ci` installs in it) out of vmesh's module, as for
// the other tools.
module github.com/vmesh/vmesh/tools/grpc-node

go 1.26
