// Package filestore turns Istio YAML into typed config objects with their
// positions (file, line, the lines of the fields the analysis points at),
// validated as Istio validates them, and feeds them to the Store
// (package store) from a watched directory (DirSource) or a git repository
// (GitSource); its subpackage mcpsource reads the same objects over xDS
// from an MCP server (MeshConfig configSources). It is one source among
// the Store's writers: it knows nothing of the model or xDS.
package filestore
